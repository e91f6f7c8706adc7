"""Reads of the log itself: its head, its chain marks, and how many streams are in each state."""

from __future__ import annotations

from typing import Any

import msgspec

from projections.rows import decode


class StateCount(msgspec.Struct, frozen=True):
    kind: str
    state: str
    count: int


def stream_counts(conn: Any) -> list[StateCount]:
    """Streams per kind and state, the source of the ``*_total`` gauges."""
    sql = "SELECT kind, state, count(*) FROM streams GROUP BY 1, 2 ORDER BY 1, 2"
    return decode(StateCount, conn.execute(sql).fetchall())


def log_head(conn: Any) -> int:
    """The last position in the log (0 when empty)."""
    return int(conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchall()[0][0])


class Mark(msgspec.Struct, frozen=True):
    """One event's place in the chain: what an anchor keeps of the log's head."""

    position: int
    hash: bytes
    recorded_at: str


def _mark(conn: Any, where: str, *params: Any) -> Mark | None:
    sql = f"SELECT position, hash, recorded_at FROM events {where}"
    found = decode(Mark, conn.execute(sql, params).fetchall())
    return found[0] if found else None


def head_mark(conn: Any) -> Mark | None:
    """The last event's position, chain hash and time (None when the log is empty)."""
    return _mark(conn, "ORDER BY position DESC LIMIT 1")


def mark_at(conn: Any, position: int) -> Mark | None:
    """The event at ``position`` (None when the log does not reach it)."""
    return _mark(conn, "WHERE position = ?", position)
