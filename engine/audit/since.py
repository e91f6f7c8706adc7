"""``verify --since``: prove the log extends a tlog-checkpoint, then verify only what came
after it (docs/auditing.md, "Verifying since a checkpoint").

A checkpoint of ``m`` events commits, through its tree head, to the chain hashes stored at
positions 1..m (``engine.merkle.tree``). The log passes when:

1. its positions are exactly 1..n, with ``n >= m``;
2. the tree over its first ``m`` chain hashes has the checkpoint's head, a consistency proof
   from ``m`` to ``n`` verifies against both heads, and the chain hash stored at ``m``, read
   from the events themselves, has an inclusion proof against the checkpoint's head (which
   binds the tail to that history even where the tree is read from stored nodes);
3. every row after ``m`` links to the one before it, starting from that hash at ``m``;
4. every event of every stream of each entity the tail touches (all of its history, before
   ``m`` too) replays legally through its machine, with contiguous versions, and each such
   row's link from the hash stored before it checks;
5. the read models that fold by entity hold, for those entities, exactly the rows a refold
   of those streams gives (the rows whose key names the entity or one of its streams), and
   no ``streams`` row was folded from a position past the head (a tail cut off).

Rows before ``m`` of other streams are trusted as the checkpoint's tree commits to their
hashes: an edit there that leaves the stored hashes as they were is only found by a full
``verify`` (or an inclusion proof of that event's recomputed hash).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine import chain, merkle
from engine.audit.note import TreeHead
from engine.audit.recorded import eras
from engine.audit.replay import CONTEXT, Part, replay
from engine.audit.source import COLUMNS, Reader, open_reader
from engine.audit.verifier import IN_PLACE_FROM, agrees, by_entity_names, which_projections
from engine.chain import Violation
from engine.declarations import with_system
from engine.errors import InvalidArgument
from engine.machines import Machines, MachineSpec
from engine.merkle.tree import open_tree
from engine.projection import Projection, ProjectionSet
from engine.streams import StreamsProjection


@dataclass
class SinceReport:
    size: int  # the checkpoint's, m
    events: int  # the log's head, n
    violations: list[Violation]
    consistent: bool  # checks 1 and 2 of the module's list held
    streams: int = 0  # streams replayed (every stream of every entity the tail touches)
    unchecked: dict[str, str] = field(default_factory=dict)
    # "tree" (checks 1 and 2), "tail" (3 to 5)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


def verify_since(
    path: str | os.PathLike[str],
    checkpoint: TreeHead,
    machines: Sequence[MachineSpec],
    projections: Sequence[Projection],
) -> SinceReport:
    """The checks of the module's list, against ``checkpoint`` (whose signature, if any, the
    caller has checked). Each violation names a position and a kind; a log that does not
    extend the checkpoint is one ``checkpoint_mismatch`` and nothing after it is verified.

    Raises:
        NotALog, SchemaTooNew, StorageError: the file cannot be audited.
        InvalidArgument: the file has an older schema (a full ``verify`` migrates a copy).
    """
    text = os.fspath(path)
    m = checkpoint.size
    reader = open_reader(text)
    try:
        if reader.schema < IN_PLACE_FROM:
            raise InvalidArgument(f"{text}: an older schema; run a full verify")
        seconds: dict[str, float] = {}
        started = time.perf_counter()
        n, violations = _extends(reader, checkpoint)
        seconds["tree"] = time.perf_counter() - started
        if violations:
            return SinceReport(m, n, violations, False, seconds=seconds)
        started = time.perf_counter()
        previous = _hash_at(reader, m)
        violations = list(
            chain.check_rows(
                reader.rows(
                    f"SELECT {COLUMNS} FROM events WHERE position > ? ORDER BY position", (m,)
                ),
                previous,
                m,
            )
        )
        code = Machines(with_system(machines))
        streams = _entity_streams(reader, m, code)
        recorded = eras(reader, code)[0]  # the rules each event was written under (ADR 0060)
        projection_set = ProjectionSet([StreamsProjection(), *projections])
        fold, unchecked = which_projections(reader, projection_set)
        if "streams" in fold:
            violations += _beyond_head(reader, n)
    finally:
        reader.close()
    CONTEXT.update(machines=code, projections=projection_set.projections, eras=recorded)
    entity_folds = by_entity_names()
    for name in fold:
        if name not in entity_folds:
            unchecked[name] = "folds across entities: only a full verify compares it"
    fold = [name for name in fold if name in entity_folds]
    violations += _replayed(text, streams, fold, m, n)
    violations.sort(key=lambda v: (v.position, v.kind))
    seconds["tail"] = time.perf_counter() - started
    return SinceReport(m, n, violations, True, len(streams), unchecked, seconds)


def _mismatch(at: int, reason: str) -> Violation:
    return Violation(at, "checkpoint_mismatch", f"does not extend the checkpoint: {reason}")


def _extends(reader: Reader, checkpoint: TreeHead) -> tuple[int, list[Violation]]:
    """The log's head and, unless it extends the checkpoint (checks 1 and 2), what is wrong.
    Positions missing or added after the checkpoint leave no tree from ``m`` to ``n`` to prove
    consistent: the first ``m`` are checked against it, and the tail's chain check says where
    the positions go wrong."""
    m = checkpoint.size
    count, lowest, n = reader.query("SELECT count(*), min(position), max(position) FROM events")[0]
    n = n or 0
    if n < m:
        return n, [_mismatch(m, f"cut short: the log holds {n} events, the checkpoint {m}")]
    whole = count == n and lowest in (1, None)  # distinct integers: exactly 1..n
    held, first = (
        (m, 1 if m else None)
        if whole
        else reader.query("SELECT count(*), min(position) FROM events WHERE position <= ?", (m,))[0]
    )
    if held != m or first not in (1, None):
        at = first if first is not None and first < 1 else m
        detail = f"the positions up to the checkpoint are not 1..{m}: {held} rows from {first}"
        return n, [Violation(at, "position_gap", detail)]
    tree = open_tree(reader, n if whole else m)
    if m == 0:
        if checkpoint.root != merkle.EMPTY_ROOT:
            return n, [_mismatch(0, "an empty checkpoint with the head of a non-empty tree")]
        return n, []
    if tree.root(m) != checkpoint.root:
        return n, [
            _mismatch(m, f"the first {m} chain hashes do not have the checkpoint's tree head")
        ]
    proof = tree.consistency(m, n) if whole else None
    if proof is not None and not merkle.verify_consistency(
        m, n, proof, checkpoint.root, tree.root()
    ):
        return n, [_mismatch(m, f"the consistency proof from {m} to {n} does not verify")]
    leaf = merkle.leaf_hash(_hash_at(reader, m))
    if not merkle.verify_inclusion(leaf, m - 1, m, tree.inclusion(m - 1, m), checkpoint.root):
        return n, [_mismatch(m, f"the chain hash stored at {m} is not the checkpoint's leaf")]
    return n, []


def _beyond_head(reader: Reader, n: int) -> list[Violation]:
    """A ``streams`` row folded from a position past the head: events the log no longer holds
    (a tail cut off, whose entities the rest of the tail may not touch)."""
    count = reader.query("SELECT count(*) FROM streams WHERE last_position > ?", (n,))[0][0]
    if not count:
        return []
    detail = f"projection streams holds {count} streams folded from events past the head {n}"
    return [Violation(n, "projection_mismatch", detail)]


def _hash_at(reader: Reader, position: int) -> bytes:
    if position == 0:
        return chain.GENESIS
    return bytes(reader.query("SELECT hash FROM events WHERE position = ?", (position,))[0][0])


def _entity_streams(reader: Reader, m: int, machines: Machines) -> list[str]:
    """Every stream of every entity the events after ``m`` touch: the touched streams, and
    ``kind:id`` for each of their ids and each declared kind that the log holds."""
    touched = [
        row[0]
        for row in reader.query("SELECT DISTINCT stream_id FROM events WHERE position > ?", (m,))
    ]
    kinds = set(machines.by_kind) | {s.partition(":")[0] for s in touched}
    entities = {s.partition(":")[2] for s in touched if ":" in s}
    candidates = sorted({f"{kind}:{entity}" for kind in kinds for entity in entities} - {*touched})
    held = reader.query(
        "SELECT value FROM json_each(?) WHERE EXISTS"
        " (SELECT 1 FROM events WHERE stream_id = value)",
        (_json(candidates),),
    )
    return sorted({*touched, *(row[0] for row in held)})


def _json(values: Sequence[str]) -> str:
    return json.dumps(list(values))


def _replayed(path: str, streams: Sequence[str], fold: Sequence[str], m: int, n: int) -> list[Any]:
    """Checks 3 (the earlier rows of the streams) to 5, by one replay of those streams."""
    if not streams:
        return []
    part = replay(path, 0, 1, fold, only=streams)
    found: list[Violation] = list(part.violations)
    if part.chain_doubted:
        found += _earlier_links(path, streams, m)
    undeclared = sorted(part.undeclared.items())
    found += [
        Violation(
            first,
            "undeclared_kind",
            f"{count} events of {kind!r} streams not replayed: no machine is declared for kind"
            f" {kind!r} (pass --machines MODULE:ATTRIBUTE)",
        )
        for kind, (first, count) in undeclared
    ]
    if part.unfoldable:
        return found
    suspects = [name for name in fold if not agrees([part], name)]
    if suspects and part.fast:  # a memory fold that is wrong? Once more through the SQL folds.
        exact: Part = replay(path, 0, 1, suspects, fast=False, only=streams)
        suspects = [name for name in suspects if not agrees([exact], name)]
    found += [
        Violation(
            n,
            "projection_mismatch",
            f"projection {name} differs from a fold of the entities the tail touches",
        )
        for name in suspects
    ]
    return found


def _earlier_links(path: str, streams: Sequence[str], m: int) -> list[Violation]:
    """The rows at or before ``m`` of ``streams`` whose link from the hash stored at the
    position before them does not check (those after ``m`` are the tail's chain check)."""
    columns = ", ".join(f"e.{c}" for c in COLUMNS.split(", "))
    reader = open_reader(path)
    try:
        rows = reader.rows(
            f"SELECT {columns}, coalesce(p.hash, CASE WHEN e.position = 1 THEN ?2 END)"
            " FROM events e LEFT JOIN events p ON p.position = e.position - 1"
            " WHERE e.stream_id IN (SELECT value FROM json_each(?1)) AND e.position <= ?3"
            " ORDER BY e.position",
            (_json(streams), chain.GENESIS, m),
        )
        return [
            Violation(row[0], "hash_mismatch", "stored hash does not match the chain")
            for row in rows
            if row[10] is None or not chain.links_hold([row])
        ]
    finally:
        reader.close()
