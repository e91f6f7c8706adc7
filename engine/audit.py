"""Audits of a log (SPEC §10): verify, diff, the state at a point. Read-only on their inputs.

``open_audit`` copies the file (SQLite backup) into a temporary folder and opens the copy, so a
file of an older schema is migrated there and a refold for the projection check never touches
the original.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from engine import chain
from engine.chain import Violation
from engine.errors import EngineError, InvalidTransition, NeedsMigration
from engine.log import Log, open_log, open_log_readonly, snapshot
from engine.machines import Machines, MachineSpec, StreamHead
from engine.projection import Projection


@contextmanager
def open_audit(
    path: str | Path,
    machines: Sequence[MachineSpec],
    projections: Sequence[Projection],
    writable: bool = False,
) -> Iterator[Log]:
    """The log at ``path`` for an audit that never modifies it: opened read-only when it is
    current and only read; otherwise (``writable``, or an older schema) a private, migrated
    copy, removed afterwards.

    Raises:
        NotALog, SchemaTooNew, StorageError: the file cannot be audited.
    """
    if not writable:
        try:
            direct = open_log_readonly(path, machines, projections)
        except NeedsMigration:
            pass
        else:
            try:
                yield direct
            finally:
                direct.close()
            return
    folder = Path(tempfile.mkdtemp(prefix="foldline-audit-"))
    try:
        copy = folder / "audit.db"
        snapshot(path, copy)
        log = open_log(copy, machines, projections, sync="normal")
        try:
            yield log
        finally:
            log.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``, called now and then during long audits."""


def verify(log: Log, progress: Progress | None = None) -> list[Violation]:
    """Every check of SPEC §10 ``verify``: the hash chain and gap-free positions, contiguous
    versions per stream, every event legal when replayed through the declared machines, and
    projections equal to a fresh fold. Each violation names a position and a kind."""
    total = log.head()
    violations = list(chain.check_rows(log.iter_rows()))
    if progress:
        progress("chain", total, total)
    heads: dict[str, StreamHead] = {}
    machines: Machines = log.machines
    for row in log.iter_rows():
        position, stream_id, version, event_type, _, _, _, state, payload, _ = row
        head = heads.get(stream_id, StreamHead(stream_id, 0, None))
        if version != head.version + 1:
            violations.append(
                Violation(
                    position, "version_gap", f"{stream_id}: version {version} after {head.version}"
                )
            )
        try:
            machine = machines.for_stream(stream_id)
            event = log.codec.decode(event_type, bytes(payload))
            expected = machine.next_state(head, event, event_type)
            if expected != state:
                violations.append(
                    Violation(
                        position,
                        "state_mismatch",
                        f"{stream_id}: recorded {state}, machine says {expected}",
                    )
                )
        except InvalidTransition as ex:
            violations.append(Violation(position, "illegal_transition", str(ex)))
        except EngineError as ex:
            violations.append(Violation(position, "undecodable", str(ex)))
        heads[stream_id] = StreamHead(stream_id, version, state)
        if progress and position % 50_000 == 0:
            progress("replay", position, total)
    if progress:
        progress("projections", total, total)
    kept = log.content_hash()
    try:
        rebuilt = log.rebuild()
    except EngineError as ex:  # an undecodable event (reported above) stops the refold
        violations.append(Violation(log.head(), "projection_unverifiable", str(ex)))
        return violations
    violations += [
        Violation(log.head(), "projection_mismatch", f"projection {name} differs from a fold")
        for name, digest in rebuilt.items()
        if kept.get(name) != digest
    ]
    return violations


def state_at(
    log: Log, position: int | None = None, time: str | None = None
) -> dict[str, dict[str, Any]]:
    """Every stream's head as of a position (inclusive) or a recorded time (inclusive)."""
    heads: dict[str, dict[str, Any]] = {}
    for row in log.iter_rows():
        if (position is not None and row[0] > position) or (time is not None and row[4] > time):
            break
        heads[row[1]] = {
            "version": row[2],
            "state": row[7],
            "event_type": row[3],
            "position": row[0],
            "recorded_at": row[4],
        }
    return heads


def heads(log: Log) -> dict[str, dict[str, Any]]:
    """Every stream's head now, from the ``streams`` projection (no scan of the log)."""
    rows = (
        log.connection()
        .execute(
            "SELECT s.stream_id, s.version, s.state, e.event_type, s.last_position, s.updated_at"
            " FROM streams s JOIN events e ON e.position = s.last_position"
        )
        .fetchall()
    )
    return {
        stream: {
            "version": version,
            "state": state,
            "event_type": event_type,
            "position": position,
            "recorded_at": recorded_at,
        }
        for stream, version, state, event_type, position, recorded_at in rows
    }


@dataclass(frozen=True)
class Diff:
    identical: bool
    common_prefix: int  # last position at which both logs hold the same history
    only_a: dict[str, list[int]]  # stream -> versions only in A (after the prefix)
    only_b: dict[str, list[int]]
    changed: dict[str, list[int]]  # stream -> versions present in both but different
    entities: dict[str, dict[str, Any]]  # stream -> {"a": head or None, "b": head or None}


def common_prefix(a: Log, b: Log) -> int:
    """The last position where both chains hold the same hash: equal there means equal up to
    there, so a binary search reads O(log n) hashes instead of the payloads."""
    low, high = 0, min(a.head(), b.head())
    while low < high:
        middle = (low + high + 1) // 2
        if a.hash_at(middle) == b.hash_at(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _events_after(log: Log, position: int) -> dict[tuple[str, int], tuple[Any, ...]]:
    return {(r[1], r[2]): (r[3], r[7], bytes(r[8])) for r in log.iter_rows(position)}


def diff(a: Log, b: Log, at: int | None = None) -> Diff:
    prefix = common_prefix(a, b)
    if prefix == a.head() == b.head():
        return Diff(True, prefix, {}, {}, {}, {})
    left, right = _events_after(a, prefix), _events_after(b, prefix)
    only_a: dict[str, list[int]] = {}
    only_b: dict[str, list[int]] = {}
    changed: dict[str, list[int]] = {}
    for key in sorted(left.keys() | right.keys()):
        bucket = (
            only_a
            if key not in right
            else only_b
            if key not in left
            else changed
            if left[key] != right[key]
            else None
        )
        if bucket is not None:
            bucket.setdefault(key[0], []).append(key[1])
    heads_a, heads_b = (
        (state_at(a, at), state_at(b, at)) if at is not None else (heads(a), heads(b))
    )
    entities = {
        stream: {"a": heads_a.get(stream), "b": heads_b.get(stream)}
        for stream in sorted(heads_a.keys() | heads_b.keys())
        if _brief(heads_a.get(stream)) != _brief(heads_b.get(stream))
    }
    return Diff(False, prefix, only_a, only_b, changed, entities)


def _brief(head: dict[str, Any] | None) -> Any:
    return None if head is None else (head["version"], head["state"], head["event_type"])


def export_line(row: tuple[Any, ...]) -> bytes:
    """One event as canonical JSON (sorted keys, the chain hash included)."""
    (
        position,
        stream_id,
        version,
        event_type,
        recorded_at,
        epoch,
        command_id,
        state,
        payload,
        digest,
    ) = row
    record = {
        "command_id": command_id,
        "epoch": epoch,
        "event": msgspec.json.decode(bytes(payload)),
        "event_type": event_type,
        "hash": bytes(digest).hex(),
        "position": position,
        "recorded_at": recorded_at,
        "state": state,
        "stream_id": stream_id,
        "version": version,
    }
    return msgspec.json.encode(record, order="sorted")
