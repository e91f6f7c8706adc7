"""Reads of the ``retired`` read model (``projections.retired``, ADR 0062): whether a policy
retired an entity, and which one an idempotency key made."""

from __future__ import annotations

from typing import Any

import msgspec

from engine.domain.job import TERMINAL as JOB_TERMINAL
from engine.domain.retention import RetiredRow
from projections.rows import select_one


def retired(conn: Any, kind: str, entity_id: str) -> RetiredRow | None:
    """The retirement of ``kind:entity_id``, None when it was not retired."""
    return select_one(conn, RetiredRow, "WHERE entity_id = ? AND kind = ?", entity_id, kind)


def retired_of_command(conn: Any, kind: str, command_id: str) -> str | None:
    """The retired entity of ``kind`` that ``command_id`` (its idempotency key) made."""
    rows = conn.execute(
        "SELECT entity_id FROM retired WHERE command_id = ? AND kind = ?", (command_id, kind)
    ).fetchall()
    return str(rows[0][0]) if rows else None


class Retirable(msgspec.Struct, frozen=True):
    """An ended job a policy may retire: its id, state, last change and idempotency key."""

    job_id: str
    state: str
    ended_at: str
    command_id: str | None


def retirable_jobs(conn: Any, ended_before: str, limit: int) -> list[Retirable]:
    """Ended jobs whose row last changed before ``ended_before`` and no job below them is
    still live (their rows are still read by their subtree's quiet gate, ADR 0050), oldest
    first, at most ``limit``."""
    marks = ", ".join("?" for _ in JOB_TERMINAL)
    rows = conn.execute(
        f"SELECT job_id, state, updated_at, command_id FROM jobs j WHERE state IN ({marks})"
        " AND updated_at < ? AND NOT EXISTS (SELECT 1 FROM jobs c WHERE c.parent_job = j.job_id"
        f" AND c.state NOT IN ({marks})) ORDER BY updated_at, job_id LIMIT ?",
        (*JOB_TERMINAL, ended_before, *JOB_TERMINAL, limit),
    ).fetchall()
    return [Retirable(*row) for row in rows]


def newest_epoch(conn: Any) -> int:
    """The epoch of the log's last event (0 when empty): a maintenance writer appends under
    the tenure in force."""
    rows = conn.execute("SELECT epoch FROM events ORDER BY position DESC LIMIT 1").fetchall()
    return int(rows[0][0]) if rows else 0
