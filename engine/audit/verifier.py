"""``verify`` on both cores: one scan per share of the streams (``engine.audit.replay``), a
fast pass, exact rechecks.

Legality needs every event of a stream in order, and a read model's row is folded from its own
stream's events, so the work splits by stream: each worker scans its share of the streams once
and, per row, checks the row's chain link from the hash stored at the position before it (every
row carries the previous hash, so no other row is needed), replays it through its machine, and
folds it into memory (``Projection.memory_folder``: the domain read models fold into Python
lists). It then compares that fold with its share of the stored tables, in the read
transaction of its scan (``engine.audit.tables``: rows kept in memory row by row as they are,
a fold written to a scratch database joined by SQLite). Every refolded row stored as it is,
and as many stored rows as refolded ones over all shares, means the tables equal the fold.

That pass can only prove a log right. Whatever it doubts is checked again the exact way, which
words the findings as before: a link that does not check, or positions that are not exactly
1..n, run the sequential chain check by position ranges (a range starts from the hash stored
before it, as the sequential check trusts a stored hash again after a broken link); a memory
fold that refuses an event reruns that share through the projections' SQL handlers; and a
projection that disagrees (a fold across streams, a wrong memory fold, a write meanwhile, or a
tampered table) is refolded once more in one piece, in one snapshot, through the SQL handlers,
before it is reported.

Nothing is written to the input and nothing is copied, unless the file has an older schema that
must be migrated first (then a private copy is).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine import chain
from engine.audit.recorded import eras
from engine.audit.replay import CONTEXT, Part, replay
from engine.audit.source import Reader, copy_log, open_reader, ranges
from engine.chain import Violation
from engine.declarations import with_system
from engine.errors import InvalidArgument
from engine.log import open_log
from engine.machines import Machines, MachineSpec
from engine.merkle.nodes import SCHEMA as NODES_SCHEMA
from engine.merkle.nodes import check_nodes
from engine.projection import Projection, ProjectionSet
from engine.streams import StreamsProjection

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``, called now and then during long audits."""

PARALLEL_FROM = 20_000  # below this many events, one process is faster than starting workers
EVENTS_PER_SHARE = 2_000_000
MAX_POSITION = (1 << 63) - 1
# The oldest schema verified in place, not on a migrated copy: migration 2 only added the
# derived ``tree_nodes``, checked where the table is, so a log without it is read as it is.
IN_PLACE_FROM = 1


@dataclass
class Report:
    events: int
    violations: list[Violation]
    # Projections that were not compared, and why (a version the code does not fold, a
    # checkpoint behind the log, a read model in the file that no declaration names).
    unchecked: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


def _check_chain(path: str, lo: int, hi: int) -> list[Violation]:
    reader = open_reader(path)
    try:
        before = reader.query(
            "SELECT position, hash FROM events WHERE position < ? ORDER BY position DESC LIMIT 1",
            (lo,),
        )
        after, previous = before[0] if before else (0, chain.GENESIS)
        rows = reader.rows(
            "SELECT position, stream_id, version, event_type, recorded_at, epoch, command_id,"
            " state, payload, hash FROM events WHERE position BETWEEN ? AND ? ORDER BY position",
            (lo if lo > 1 else -MAX_POSITION, hi),  # the first range also sees rows before 1
        )
        return list(chain.check_rows(rows, bytes(previous), after))
    finally:
        reader.close()


def _check_tree_nodes(path: str) -> list[Violation]:
    """The stored Merkle tree nodes against the chain hashes (``engine.merkle.nodes``)."""
    reader = open_reader(path)
    try:
        if reader.schema < NODES_SCHEMA:
            return []
        return check_nodes(reader.rows, reader.path)
    except InvalidArgument:  # a position missing: the chain check says where
        return []
    finally:
        reader.close()


def which_projections(
    reader: Reader, projections: ProjectionSet
) -> tuple[list[str], dict[str, str]]:
    stored = {
        name: (version, checkpoint)
        for name, version, checkpoint in reader.query(
            "SELECT name, version, checkpoint FROM projections"
        )
    }
    checked, unchecked = [], {}
    for projection in projections.projections:
        version, checkpoint = stored.get(projection.name, (None, None))
        if version is None:
            continue  # the file does not keep it: nothing to compare
        if version != projection.version:
            unchecked[projection.name] = (
                f"stored version {version}, this code folds {projection.version}"
            )
        elif checkpoint is not None:
            unchecked[projection.name] = f"behind the log (checkpoint {checkpoint})"
        else:
            checked.append(projection.name)
    for name in sorted(stored.keys() - projections.names):
        unchecked[name] = "kept in the file, but not declared (pass --machines)"
    return checked, unchecked


def _pool(workers: int) -> ProcessPoolExecutor | None:
    if workers < 2:
        return None
    # Imported here: most logs verify in one process, and every `foldline` command pays for
    # what it imports at its start (a few ms for multiprocessing and the pool).
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if "fork" not in multiprocessing.get_all_start_methods():
        return None
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))


def verify(
    path: str | os.PathLike[str],
    machines: Sequence[MachineSpec],
    projections: Sequence[Projection],
    progress: Progress | None = None,
    workers: int | None = None,
    by_record: bool = True,
    refold: bool = True,
) -> Report:
    """Every check of design.md §10 ``verify``: the hash chain and gap-free positions, contiguous
    versions per stream, every event legal when replayed through the declared machines (a
    stream kind with no declaration is one finding), and every projection equal to a fresh
    fold, and every stored Merkle tree node equal to the head of its chain hashes. Each
    violation names a position and a kind.

    ``by_record``: judge each event by the declarations recorded before it (ADR 0060), the
    given ``machines`` only before the first; otherwise every event by ``machines`` (what
    ``foldline replay`` asks: would this code accept the whole history?). ``refold``: compare
    the read models with a fold too; without it only the log itself is judged (``judge``).

    Raises:
        NotALog, SchemaTooNew, StorageError: the file cannot be audited.
    """
    reader = open_reader(path)
    try:
        if reader.schema < IN_PLACE_FROM:
            return _verify_migrated_copy(
                reader, machines, projections, progress, workers, by_record, refold
            )
        head = reader.head()
        projection_set = ProjectionSet([StreamsProjection(), *projections])
        fold, unchecked = which_projections(reader, projection_set) if refold else ([], {})
        code = Machines(with_system(machines))
        recorded, declared = eras(reader, code) if by_record else ([], [])
    finally:
        reader.close()
    CONTEXT.update(machines=code, projections=projection_set.projections, eras=recorded)
    text = os.fspath(path)
    count = workers or (min(2, os.cpu_count() or 1) if head >= PARALLEL_FROM else 1)
    pool = _pool(count)
    # Each share of the streams is refolded in memory (and copied once to be compared):
    # enough shares that none holds much more than two million events.
    shares = max(count, -(-head // EVENTS_PER_SHARE))
    # A read model that folds across entities is only compared with a refold in one piece
    # (`_compare_projections`): the shares need not fold it.
    by_share = fold if shares == 1 else [name for name in fold if name in by_entity_names()]
    try:
        if pool is None:
            parts = [replay(text, part, shares, by_share) for part in range(shares)]
            nodes = _check_tree_nodes(text)
        else:
            replays: list[Future[Part]] = [
                pool.submit(replay, text, part, shares, by_share) for part in range(shares)
            ]
            checked_nodes = pool.submit(_check_tree_nodes, text)
            parts = [future.result() for future in replays]
            nodes = checked_nodes.result()
        chains: list[list[Violation]] = []
        if not _links_hold(parts):  # the exact check, by segments: it says what is wrong
            segments = ranges(head, count) or [(1, 0)]
            if pool is None:
                chains = [_check_chain(text, lo, hi) for lo, hi in segments]
            else:
                futures = [pool.submit(_check_chain, text, lo, hi) for lo, hi in segments]
                chains = [future.result() for future in futures]
        if progress:
            progress("chain", head, head)
    finally:
        if pool is not None:
            pool.shutdown()
    if progress:
        progress("projections", head, head)
    violations = [v for found in chains for v in found] + nodes + declared
    violations += [v for part in parts for v in part.violations]
    undeclared: dict[str, list[int]] = {}
    for part in parts:
        for kind, (first, n) in part.undeclared.items():
            seen = undeclared.setdefault(kind, [first, 0])
            seen[0], seen[1] = min(seen[0], first), seen[1] + n
    violations += [
        Violation(
            first,
            "undeclared_kind",
            f"{n} events of {kind!r} streams not replayed: no machine is declared for kind"
            f" {kind!r} (pass --machines MODULE:ATTRIBUTE)",
        )
        for kind, (first, n) in sorted(undeclared.items())
    ]
    violations += _compare_projections(text, fold, parts, head)
    violations.sort(key=lambda v: (v.position, v.kind))
    return Report(head, violations, unchecked)


UNJUDGED = "undeclared_kind"
"""The finding of streams no declaration names, neither the code's nor the log's record: not
judged, rather than judged wrong."""


def judge(
    path: str | os.PathLike[str],
    machines: Sequence[MachineSpec],
    progress: Progress | None = None,
) -> list[Violation]:
    """What ``rebuild``, ``state`` and ``diff`` ask before they trust a log (ADR 0060): every
    event judged by the declarations in force when it was recorded (the record's, the given
    ``machines`` before the first), the versions and the chain, by ``verify``'s own replay,
    without comparing the read models. An edit that swaps the recorded declarations is found
    here as by ``verify``: by the chain, or where the swapped rules refuse the events after
    them. ``undeclared_kind`` findings (``UNJUDGED``) are streams nobody declared.

    Raises:
        NotALog, SchemaTooNew, StorageError: the file cannot be audited.
    """
    return verify(path, machines, (), progress, refold=False).violations


def _links_hold(parts: Sequence[Part]) -> bool:
    """The fast passes checked every row's link from the hash stored at the position before
    it, and the positions run 1..n without a gap: what the sequential chain check proves."""
    counts = {part.counts for part in parts}
    if len(counts) != 1 or not all(part.fast and not part.chain_doubted for part in parts):
        return False  # a doubtful link, or the shares saw different snapshots of a live log
    rows, lowest, highest = counts.pop()
    return sum(part.rows for part in parts) == rows == (highest or 0) and lowest in (1, None)


def agrees(parts: Sequence[Part], name: str) -> bool:
    """Every refolded row is stored as it is, and there are as many rows as refolded: the
    stored tables are exactly the fold (when every part saw the same log)."""
    differing = sum(p.compared[name][0] for p in parts)
    folded = sum(p.compared[name][1] for p in parts)
    stored = {p.compared[name][2] for p in parts}
    return differing == 0 and stored == {folded}


def by_entity_names() -> set[str]:
    """The projections whose rows each fold from their own entity's streams only."""
    return {
        p.name
        for p in CONTEXT["projections"]
        if p.folds_by_entity or isinstance(p, StreamsProjection)
    }


def _compare_projections(
    path: str, fold: Sequence[str], parts: Sequence[Part], head: int
) -> list[Violation]:
    if any(p.unfoldable for p in parts):  # said where, by the part that could not
        return []
    split = len(parts) > 1
    # Shares that each agree prove nothing for a read model that folds across entities (its
    # rows may depend on events of another share), so the shares do not fold it at all.
    suspects = [
        name
        for name in fold
        if (split and name not in by_entity_names()) or not agrees(parts, name)
    ]
    if suspects and (split or parts[0].fast):
        # A fold across streams, a write meanwhile, or a memory fold that is wrong? Once more
        # in one piece, in one snapshot, through the folds that wrote the tables.
        whole = replay(path, 0, 1, suspects, fast=False)
        suspects = [name for name in suspects if not agrees([whole], name)]
    return [
        Violation(head, "projection_mismatch", f"projection {name} differs from a fold")
        for name in suspects
    ]


def _verify_migrated_copy(
    reader: Reader,
    machines: Sequence[MachineSpec],
    projections: Sequence[Projection],
    progress: Progress | None,
    workers: int | None,
    by_record: bool,
    refold: bool,
) -> Report:
    """An older schema: migrate a private copy, verify that."""
    folder = Path(tempfile.mkdtemp(prefix="foldline-audit-"))
    try:
        copy = folder / "audit.db"
        copy_log(reader, copy)
        open_log(copy, machines, projections, sync="normal").close()
        return verify(copy, machines, projections, progress, workers, by_record, refold)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
