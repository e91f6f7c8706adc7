"""``diff``: what differs between two logs, decided from the rows themselves.

Stored hashes are never trusted to say two rows are equal: a payload edited behind the triggers'
back keeps its old hash, and that edit is exactly what an auditor diffs for. Both files are
opened read-only and B is ATTACHed to A's connection, so SQLite compares the rows (stream,
version, type, recorded time, epoch, command, state, payload) in C, on both cores:

1. the first divergent position: a join on ``position``, split into ranges scanned by threads
   (apsw lets go of the GIL while SQLite works), each stopping at its first differing row;
2. per stream, after that position: versions only in A, only in B, ``changed`` (same stream
   and version, different content) and ``moved`` (same content at another position): A's
   rows in chunks of positions read by threads and handed over in one step each (``CHUNK``),
   grouped in runs of one stream, then B's only when A's rows do not account for all of B's
   after the fork (counted); a row is looked up by ``(stream_id, version)`` only where the
   other side holds another event at its position;
3. which side's chain does not verify: the stored links of the first row after the divergence
   and of the rows that differ (up to ``CHAIN_CHECKS`` per side) are recomputed; ``verify``
   proves a whole chain;
4. the entities whose head differs (state, version, last event type), read from the rows of
   the streams whose differing rows can change a head, both sides in one statement.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engine import chain
from engine.audit.grouping import MAX_POSITION, Grouped, grouped, in_order
from engine.audit.source import CONTENT, Reader, open_reader, ranges, uri

T = TypeVar("T")
CHAIN_CHECKS = 1000
MMAP_BYTES = 1 << 34  # address space only: pages come from the OS cache
CACHE_KIB = 256 * 1024

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
        # Lookups by (stream_id, version) jump all over both files: reading pages through a
        # memory map instead of one read() each, with a large cache, halves a big diff.
        for schema in ("main", "b"):
            conn.execute(f"PRAGMA {schema}.mmap_size = {MMAP_BYTES}")
            conn.execute(f"PRAGMA {schema}.cache_size = -{CACHE_KIB}")
    return conn


def _parallel(calls: list[Callable[[], T]]) -> list[T]:
    if len(calls) < 2:
        return [call() for call in calls]
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def first_divergence(reader: Reader, other: str, head_a: int, head_b: int) -> int | None:
    """The first position where exactly one log has a row, or both have different rows.

    Each range stops at its first differing row, so logs that part early cost little; logs
    that part late cost one positional join of the two files, split over threads.
    """
    last = min(head_a, head_b)

    def scan(lo: int, hi: int) -> int | None:
        rows = (
            _connection(reader, other)
            .execute(
                "SELECT a.position FROM main.events a LEFT JOIN b.events b"
                " ON b.position = a.position WHERE a.position BETWEEN ? AND ?"
                " AND (b.position IS NULL OR " + _DIFFERENT + ") ORDER BY a.position LIMIT 1",
                (lo, hi),
            )
            .fetchall()
        )
        return rows[0][0] if rows else None

    parts = min(4, os.cpu_count() or 1) if last > 50_000 else 1
    found = [
        first
        for first in _parallel([lambda r=r: scan(*r) for r in ranges(last, parts)])  # type: ignore[misc]
        if first is not None
    ]
    if head_a != head_b:  # one log goes on where the other stops
        found.append(last + 1)
    conn = _connection(reader, other)
    lowest = conn.execute(  # a row before position 1 exists only in a tampered log
        "SELECT min((SELECT min(position) FROM main.events), (SELECT min(position) FROM b.events))"
    ).fetchall()[0][0]
    if lowest is not None and lowest < 1:
        found.append(lowest)
    first = min(found, default=last + 1)
    # Below ``first`` every row of A has its twin in B. B holds no other row there unless A
    # has a gap, which its row count shows (a count of the whole table is a B-tree count,
    # nearly free; a count of a range reads every page); only then look for what A lacks.
    rows_in_a = conn.execute("SELECT count(*) FROM main.events").fetchall()[0][0]
    below = first - 1 if rows_in_a == head_a else -1
    if below != first - 1:
        lacking = conn.execute(
            "SELECT min(b.position) FROM b.events b WHERE b.position < ? AND NOT EXISTS"
            " (SELECT 1 FROM main.events a WHERE a.position = b.position)",
            (first,),
        ).fetchall()[0][0]
        if lacking is not None:
            first = min(first, lacking)
    return first if first <= last or head_a != head_b else None


# The rows after the prefix that B does not hold identically, seen from A: 0 only in A,
# 1 changed (same stream and version, other content), 2 moved (same content, other position).
_A_ROWS = (
    "SELECT CASE WHEN b.position IS NULL THEN 0 WHEN " + _DIFFERENT + " THEN 1 ELSE 2 END"
    " AS kind, a.stream_id, a.version, a.position, b.position AS other FROM main.events a"
    " LEFT JOIN b.events b ON b.stream_id = a.stream_id AND b.version = a.version"
    " AND b.position > ?1 WHERE a.position > ?1 AND a.position BETWEEN ?2 AND ?3"
    " AND (b.position IS NULL OR b.position != a.position OR " + _DIFFERENT + ")"
)
# The same rows, found faster: most rows sit at the same position on both sides, and a join on
# the position is one B-tree search where a join on (stream_id, version) is two; only a row
# whose position holds another event on B is looked up by stream and version. Each row comes
# with its code: kind * 2, plus 1 when a field of the head (state, event type) may differ,
# decided in one CASE (a kind and a flag in two CASEs cost SQLite a third more, measured).
_SAME_KEY = "bp.stream_id IS a.stream_id AND bp.version IS a.version"
_A_GROUPED = (
    "SELECT CASE WHEN NOT (" + _SAME_KEY + ") THEN (SELECT CASE WHEN b.position IS NULL"
    " THEN 0 WHEN " + _DIFFERENT + " THEN 1 ELSE 2 END FROM (SELECT 1) LEFT JOIN b.events b"
    " ON b.stream_id = a.stream_id AND b.version = a.version AND b.position > ?1) * 2 + 1"
    " WHEN a.state IS NOT bp.state OR a.event_type IS NOT bp.event_type THEN 3 ELSE 2 END"
    " AS code, a.stream_id, a.version"
    " FROM main.events a LEFT JOIN b.events bp ON bp.position = a.position"
    # Every row but those B holds at the same position: a row whose position holds another
    # stream or version on B differs there too (the comparison covers those columns).
    " WHERE a.position > ?1 AND a.position BETWEEN ?2 AND ?3 AND ("
    + _DIFFERENT.replace("b.", "bp.")
    + ")"
)
# B's rows that A lacks: a row whose position holds the same stream and version on A is there.
_B_ONLY = (
    " FROM b.events b LEFT JOIN main.events ap ON ap.position = b.position"
    " WHERE b.position > ?1 AND b.position BETWEEN ?2 AND ?3"
    " AND CASE WHEN ap.stream_id IS b.stream_id AND ap.version IS b.version THEN 0"
    " ELSE NOT EXISTS (SELECT 1 FROM main.events a WHERE a.stream_id = b.stream_id"
    " AND a.version = b.version AND a.position > ?1) END"
)
_B_ROWS = "SELECT 1 AS code, b.stream_id, b.version" + _B_ONLY  # only in B: kind 0
_B_POSITIONS = "SELECT b.position AS position, NULL AS other, 0 AS kind" + _B_ONLY


def _b_holds_no_other_rows(reader: Reader, other: str, prefix: int, left: Grouped) -> bool:
    """Every row of A after the prefix but those only in A has its (stream, version) on B
    after the prefix, a different row each ((stream, version) is unique): when B holds no
    more rows than those there, it has none that A lacks, and needs no scan of its own."""
    conn = _connection(reader, other)
    if not _unique_stream_versions(conn):  # a rebuilt table could hold one key twice
        return False
    only_a = sum(len(versions) for versions in left.streams[0].values())
    return _rows_after(conn, "b", prefix) == _rows_after(conn, "main", prefix) - only_a


def _unique_stream_versions(conn: Any) -> bool:
    """A's events table keeps its UNIQUE (stream_id, version): no two rows share a key."""
    for _, name, unique, _, partial in conn.execute("PRAGMA main.index_list(events)").fetchall():
        columns = [row[2] for row in conn.execute(f'PRAGMA main.index_info("{name}")')]
        if unique and not partial and columns == ["stream_id", "version"]:
            return True
    return False


def _rows_after(conn: Any, schema: str, prefix: int) -> int:
    """Rows after a position, counting the shorter side of it: a count of the whole table
    reads the smallest index (nearly free), a count of a range reads every page of it."""
    table = f"{schema}.events"
    last = conn.execute(f"SELECT max(position) FROM {table}").fetchall()[0][0]
    if last is None or prefix > last // 2:
        after = conn.execute(f"SELECT count(*) FROM {table} WHERE position > ?", (prefix,))
        return int(after.fetchall()[0][0])
    # Two statements: SQLite counts a whole table from its smallest index only when count(*)
    # is all the statement asks (with max() beside it, it reads every row).
    total = conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    before = conn.execute(f"SELECT count(*) FROM {table} WHERE position <= ?", (prefix,))
    return int(total - before.fetchall()[0][0])


def _first_positions(reader: Reader, other: str, rows: str, prefix: int) -> list[Any]:
    """The first differing rows (position, other side's position), for the chain checks."""
    return list(
        _connection(reader, other).execute(
            f"SELECT position, other, kind FROM ({rows}) ORDER BY position LIMIT {CHAIN_CHECKS}",
            (prefix, prefix + 1, MAX_POSITION),
        )
    )


def _check_links(
    reader: Reader, other: str, schema: str, prefix: int, positions: list[int]
) -> list[chain.Violation]:
    """Recompute the stored link of the first row after the prefix and of the rows at
    ``positions`` (up to ``CHAIN_CHECKS``) from the row stored before each."""
    conn = _connection(reader, other)
    first = conn.execute(
        f"SELECT min(position) FROM {schema}.events WHERE position > ?", (prefix,)
    ).fetchall()[0][0]
    wanted = sorted({*positions[:CHAIN_CHECKS], *([first] if first is not None else [])})
    found: list[chain.Violation] = []
    for row in conn.execute(
        f"SELECT e.position, e.stream_id, e.version, e.event_type, e.recorded_at, e.epoch,"
        f" e.command_id, e.state, e.payload, e.hash, p.position, p.hash"
        f" FROM json_each(?) j JOIN {schema}.events e ON e.position = j.value"
        f" LEFT JOIN {schema}.events p ON p.position = (SELECT max(position)"
        f" FROM {schema}.events WHERE position < e.position)",
        (json.dumps(wanted),),
    ):
        after, previous = (row[10], bytes(row[11])) if row[10] is not None else (0, chain.GENESIS)
        found += chain.check_rows([row[:10]], previous, after)
    return found


def _head(conn: Any, schema: str, stream_id: str, at: int) -> dict[str, Any] | None:
    """A stream's head read from its rows (at or before ``at``)."""
    rows = conn.execute(
        f"SELECT version, state, event_type, position, recorded_at FROM {schema}.events"
        " WHERE stream_id = ? AND position <= ? ORDER BY version DESC LIMIT 1",
        (stream_id, at),
    ).fetchall()
    if not rows:
        return None
    version, state, event_type, position, recorded_at = rows[0]
    return {
        "version": version,
        "state": state,
        "event_type": event_type,
        "position": position,
        "recorded_at": recorded_at,
    }


_HEAD_FIELDS = ("version", "state", "event_type", "position", "recorded_at")  # as `_head`


def _head_of(schema: str) -> str:
    return (
        f"(SELECT position FROM {schema}.events WHERE stream_id = s.value AND position <= ?2"
        " ORDER BY version DESC LIMIT 1)"
    )


# Both sides' heads of the given streams, in one statement, only where they differ: each head is
# one search of the (stream_id, version) index inside SQLite, not two queries from Python.
_DIFFERENT_HEADS = (
    "SELECT s.value, "
    + ", ".join(f"a.{c}" for c in _HEAD_FIELDS)
    + ", "
    + ", ".join(f"b.{c}" for c in _HEAD_FIELDS)
    + " FROM json_each(?1) s"
    + f" LEFT JOIN main.events a ON a.position = {_head_of('main')}"
    + f" LEFT JOIN b.events b ON b.position = {_head_of('b')}"
    + " WHERE a.version IS NOT b.version OR a.state IS NOT b.state"
    + " OR a.event_type IS NOT b.event_type"
)


def _entities(
    reader: Reader, other: str, streams: set[str], at: int | None
) -> dict[str, dict[str, Any]]:
    """The streams whose heads (version, state, last event type) differ, read from the rows.
    Only streams with a row that differs in one of those can have one."""
    conn = _connection(reader, other)
    last = MAX_POSITION if at is None else at
    ordered = in_order(streams)
    entities = {}
    if all(type(stream_id) is str for stream_id in ordered):
        found = {
            row[0]: {"a": _head_row(row[1:6]), "b": _head_row(row[6:11])}
            for row in conn.execute(_DIFFERENT_HEADS, (json.dumps(ordered), last))
        }
        return {stream_id: found[stream_id] for stream_id in ordered if stream_id in found}
    for stream_id in ordered:  # a tampered stream id that JSON cannot carry (a BLOB)
        a, b = _head(conn, "main", stream_id, last), _head(conn, "b", stream_id, last)
        if _brief(a) != _brief(b):
            entities[stream_id] = {"a": a, "b": b}
    return entities


def _head_row(row: tuple[Any, ...]) -> dict[str, Any] | None:
    """A head from its columns (``_HEAD_FIELDS``); none when the stream has no row there."""
    return None if row[3] is None else dict(zip(_HEAD_FIELDS, row, strict=True))


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
        left = grouped(lambda: _connection(reader, other), _A_GROUPED, prefix, head_a)
        b_lacks_none = _b_holds_no_other_rows(reader, other, prefix, left)
        right = (
            Grouped({0: {}, 1: {}, 2: {}}, set())
            if b_lacks_none
            else grouped(lambda: _connection(reader, other), _B_ROWS, prefix, head_b)
        )
        suspects = left.heads_may_differ | right.heads_may_differ
        if at is not None:  # a moved row may sit before `at` on one side only
            suspects |= left.streams[2].keys()
        entities = _entities(reader, other, suspects, at)
        firsts = _first_positions(reader, other, _A_ROWS, prefix)
        only_b = [] if b_lacks_none else _first_positions(reader, other, _B_POSITIONS, prefix)
        links = {
            "a": _check_links(reader, other, "main", prefix, [p for p, _, k in firsts if k < 2]),
            "b": _check_links(
                reader,
                other,
                "b",
                prefix,
                [o for _, o, k in firsts if k == 1] + [p for p, _, _ in only_b],
            ),
        }
        return Diff(
            False,
            prefix,
            heads,
            left.streams[0],
            right.streams[0],
            left.streams[1],
            left.streams[2],
            entities,
            links,
        )
    finally:
        reader.close()
