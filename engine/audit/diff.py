"""``diff``: what differs between two logs, decided from the rows themselves.

Stored hashes are never trusted to say two rows are equal: a payload edited behind the triggers'
back keeps its old hash, and that edit is exactly what an auditor diffs for. Both files are
opened read-only and B is ATTACHed to A's connection, so SQLite compares the rows (stream,
version, type, recorded time, epoch, command, state, payload) in C, on both cores:

1. the first divergent position: a join on ``position``, split into ranges scanned by threads
   (apsw lets go of the GIL while SQLite works);
2. per stream, after that position: versions only in A, only in B, ``changed`` (same stream
   and version, different content) and ``moved`` (same content at another position), two
   joins on the ``(stream_id, version)`` index, one per side, in parallel;
3. which side's chain does not verify: the stored links of the first row after the divergence
   and of the rows that differ (up to ``CHAIN_CHECKS`` per side) are recomputed; ``verify``
   proves a whole chain;
4. the entities whose head differs (state, version, last event type).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engine import chain
from engine.audit.source import CONTENT, Reader, open_reader, ranges, uri

T = TypeVar("T")
CHAIN_CHECKS = 1000
MAX_POSITION = (1 << 63) - 1

_DIFFERENT = " OR ".join(f"a.{c} IS NOT b.{c}" for c in (*CONTENT, "payload"))


@dataclass(frozen=True)
class Diff:
    identical: bool
    common_prefix: int  # last position up to which both logs hold the same rows
    heads: dict[str, int]  # side -> its last position
    only_a: dict[str, list[int]]  # stream -> versions only in A (after the prefix)
    only_b: dict[str, list[int]]
    changed: dict[str, list[int]]  # stream -> versions in both, with different content
    moved: dict[str, list[int]]  # stream -> versions with equal content at other positions
    entities: dict[str, dict[str, Any]]  # stream -> {"a": head or None, "b": head or None}
    # side -> violations of the stored chain among the rows checked (see module doc)
    chain: dict[str, list[chain.Violation]] = field(default_factory=dict)

    def broken_sides(self) -> list[str]:
        return [side for side, found in self.chain.items() if found]


def _connection(reader: Reader, other: str) -> Any:
    """This thread's connection to A, with B attached as ``b`` (once per connection)."""
    conn = reader.log.connection()
    if not any(row[1] == "b" for row in conn.execute("PRAGMA database_list")):
        reader.query("ATTACH DATABASE ? AS b", (other,))
    return conn


def _parallel(jobs: list[Callable[[], T]]) -> list[T]:
    if len(jobs) == 1:
        return [jobs[0]()]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(lambda job: job(), jobs))


def first_divergence(reader: Reader, other: str, head_a: int, head_b: int) -> int | None:
    """The first position where exactly one log has a row, or both have different rows."""
    last = max(head_a, head_b)
    if last == 0:
        return None

    def scan(lo: int, hi: int) -> tuple[int | None, int]:
        row = (
            _connection(reader, other)
            .execute(
                "SELECT min(CASE WHEN b.position IS NULL OR " + _DIFFERENT + " THEN a.position"
                " END), count(*) FROM main.events a LEFT JOIN b.events b"
                " ON b.position = a.position WHERE a.position BETWEEN ? AND ?",
                (lo, hi),
            )
            .fetchall()[0]
        )
        return row[0], row[1]

    parts = min(4, os.cpu_count() or 1) if last > 50_000 else 1
    found = _parallel([lambda r=r: scan(*r) for r in ranges(last, parts)])  # type: ignore[misc]
    candidates = [first for first, _ in found if first is not None]
    rows_in_a = sum(count for _, count in found)
    if head_a != head_b:  # one log goes on where the other stops
        candidates.append(min(head_a, head_b) + 1)
    if rows_in_a != head_a:  # A has a gap: a position B holds and A lacks may come first
        first_only_b = (
            _connection(reader, other)
            .execute(
                "SELECT min(b.position) FROM b.events b WHERE NOT EXISTS"
                " (SELECT 1 FROM main.events a WHERE a.position = b.position)"
            )
            .fetchall()[0][0]
        )
        if first_only_b is not None:
            candidates.append(first_only_b)
    return min(candidates) if candidates else None


def _versions(pairs: list[tuple[str, int]]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for stream_id, version in sorted(pairs):
        grouped.setdefault(stream_id, []).append(version)
    return grouped


def _streams_after(reader: Reader, other: str, prefix: int) -> dict[str, list[Any]]:
    """Every event after the prefix that the other side does not hold identically."""

    def side_a() -> list[Any]:
        return list(
            _connection(reader, other).execute(
                "SELECT a.stream_id, a.version, a.position, b.position, " + _DIFFERENT + " FROM"
                " main.events a LEFT JOIN b.events b ON b.stream_id = a.stream_id"
                " AND b.version = a.version AND b.position > ?1 WHERE a.position > ?1"
                " AND (b.position IS NULL OR b.position != a.position OR " + _DIFFERENT + ")",
                (prefix,),
            )
        )

    def side_b() -> list[Any]:
        return list(
            _connection(reader, other).execute(
                "SELECT b.stream_id, b.version, b.position FROM b.events b WHERE b.position > ?1"
                " AND NOT EXISTS (SELECT 1 FROM main.events a WHERE a.stream_id = b.stream_id"
                " AND a.version = b.version AND a.position > ?1)",
                (prefix,),
            )
        )

    left, right = _parallel([side_a, side_b])
    return {"a": left, "b": right}


def _check_links(reader: Reader, schema: str, positions: list[int]) -> list[chain.Violation]:
    """Recompute the stored link of each row at ``positions`` from the row before it."""
    conn = reader.log.connection()
    found: list[chain.Violation] = []
    for position in sorted(set(positions))[:CHAIN_CHECKS]:
        before = conn.execute(
            f"SELECT position, hash FROM {schema}.events WHERE position < ?"
            " ORDER BY position DESC LIMIT 1",
            (position,),
        ).fetchall()
        after, previous = before[0] if before else (0, chain.GENESIS)
        rows = conn.execute(
            f"SELECT position, stream_id, version, event_type, recorded_at, epoch, command_id,"
            f" state, payload, hash FROM {schema}.events WHERE position = ?",
            (position,),
        ).fetchall()
        found += chain.check_rows(rows, bytes(previous), after)
    return found


def _heads(reader: Reader, schema: str, prefix: int, at: int | None) -> dict[str, Any]:
    """The head of every stream touched after the prefix (at ``at`` when given), read from
    the rows; the ``streams`` read model only says where each head is."""
    conn = reader.log.connection()
    if at is not None:
        # One aggregate, so SQLite takes the other columns from the row holding the max.
        rows = conn.execute(
            f"SELECT * FROM (SELECT stream_id, version, state, event_type, max(position) AS p,"
            f" recorded_at FROM {schema}.events WHERE position <= ? GROUP BY stream_id)"
            f" WHERE p > ?",
            (at, prefix),
        ).fetchall()
    else:
        rows = conn.execute(
            f"SELECT e.stream_id, e.version, e.state, e.event_type, e.position, e.recorded_at"
            f" FROM {schema}.streams s JOIN {schema}.events e ON e.position = s.last_position"
            f" AND e.stream_id = s.stream_id AND e.version = s.version"
            f" WHERE s.last_position > ?",
            (prefix,),
        ).fetchall()
        # A head the read model points at wrongly (a truncated tail): read it from the rows.
        stale = conn.execute(
            f"SELECT s.stream_id FROM {schema}.streams s WHERE s.last_position > ? AND NOT"
            f" EXISTS (SELECT 1 FROM {schema}.events e WHERE e.position = s.last_position"
            f" AND e.stream_id = s.stream_id AND e.version = s.version)",
            (prefix,),
        ).fetchall()
        for (stream_id,) in stale:
            rows += conn.execute(
                f"SELECT stream_id, version, state, event_type, position, recorded_at FROM"
                f" {schema}.events WHERE stream_id = ? ORDER BY version DESC LIMIT 1",
                (stream_id,),
            ).fetchall()
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


def _complete(
    reader: Reader, schema: str, heads: dict[str, Any], streams: set[str], at: int | None
) -> None:
    """Add the heads of streams this side last touched before the prefix (the other did)."""
    conn = reader.log.connection()
    for stream_id in sorted(streams):
        rows = conn.execute(
            f"SELECT version, state, event_type, position, recorded_at FROM {schema}.events"
            " WHERE stream_id = ? AND position <= ? ORDER BY version DESC LIMIT 1",
            (stream_id, MAX_POSITION if at is None else at),
        ).fetchall()
        if rows:
            version, state, event_type, position, recorded_at = rows[0]
            heads[stream_id] = {
                "version": version,
                "state": state,
                "event_type": event_type,
                "position": position,
                "recorded_at": recorded_at,
            }


def _brief(head: dict[str, Any] | None) -> Any:
    return None if head is None else (head["version"], head["state"], head["event_type"])


def diff(
    path_a: str | os.PathLike[str], path_b: str | os.PathLike[str], at: int | None = None
) -> Diff:
    """Compare two logs by content. Both are only read.

    Raises:
        NotALog, SchemaTooNew, StorageError: either file cannot be audited.
    """
    open_reader(path_b).close()  # B is a readable foldline log, or a clear error now
    other = uri(path_b)
    reader = open_reader(path_a)
    try:
        _connection(reader, other)
        conn = reader.log.connection()
        head_a = conn.execute("SELECT coalesce(max(position), 0) FROM main.events").fetchall()[0][0]
        head_b = conn.execute("SELECT coalesce(max(position), 0) FROM b.events").fetchall()[0][0]
        heads = {"a": head_a, "b": head_b}
        divergence = first_divergence(reader, other, head_a, head_b)
        if divergence is None:
            return Diff(True, head_a, heads, {}, {}, {}, {}, {}, {"a": [], "b": []})
        prefix = divergence - 1
        after = _streams_after(reader, other, prefix)
        only_a, changed, moved = [], [], []
        checks: dict[str, list[int]] = {"a": [], "b": []}
        for stream_id, version, position, other_position, different in after["a"]:
            if other_position is None:
                only_a.append((stream_id, version))
                checks["a"].append(position)
            elif different:
                changed.append((stream_id, version))
                checks["a"].append(position)
                checks["b"].append(other_position)
            else:
                moved.append((stream_id, version))
        only_b = [(stream_id, version) for stream_id, version, _ in after["b"]]
        checks["b"] += [position for _, _, position in after["b"]]
        for side, schema in (("a", "main"), ("b", "b")):
            first = conn.execute(
                f"SELECT min(position) FROM {schema}.events WHERE position > ?", (prefix,)
            ).fetchall()[0][0]
            if first is not None:
                checks[side].append(first)
        links = {
            side: _check_links(reader, schema, checks[side])
            for side, schema in (("a", "main"), ("b", "b"))
        }
        heads_a, heads_b = _heads(reader, "main", prefix, at), _heads(reader, "b", prefix, at)
        _complete(reader, "main", heads_a, heads_b.keys() - heads_a.keys(), at)
        _complete(reader, "b", heads_b, heads_a.keys() - heads_b.keys(), at)
        entities = {
            stream: {"a": heads_a.get(stream), "b": heads_b.get(stream)}
            for stream in sorted(heads_a.keys() | heads_b.keys())
            if _brief(heads_a.get(stream)) != _brief(heads_b.get(stream))
        }
        return Diff(
            False,
            prefix,
            heads,
            _versions(only_a),
            _versions(only_b),
            _versions(changed),
            _versions(moved),
            entities,
            links,
        )
    finally:
        reader.close()
