"""Reads of push notifications (``projections.push``, ADR 0039): a task's configs, the
deliveries a holder may claim now, and how many are still owed (``/ping``, ``/metrics``)."""

from __future__ import annotations

from typing import Any

from engine.domain.rows import DeliveryRow, PushConfigRow
from projections.push import OWED
from projections.rows import select, select_one

_OWED = ", ".join(f"'{p}'" for p in OWED)


def push_configs(conn: Any, task_id: str) -> list[PushConfigRow]:
    """A task's configs, oldest first."""
    return select(conn, PushConfigRow, "WHERE task_id = ? ORDER BY position", task_id)


def push_config(conn: Any, task_id: str, config_id: str) -> PushConfigRow | None:
    where = "WHERE task_id = ? AND config_id = ?"
    return select_one(conn, PushConfigRow, where, task_id, config_id)


def claimable(conn: Any, holder: str, now: str, limit: int) -> list[DeliveryRow]:
    """Deliveries ``holder`` may claim at ``now``, the longest due first: never tried, due
    again, or claimed by another holder (a server gone) or with a claim run out."""
    where = (
        "WHERE progress = 'queued' OR (progress = 'waiting' AND due_at <= ?)"
        " OR (progress = 'sending' AND (holder <> ? OR claim_until <= ?))"
        " ORDER BY due_at, delivery_id LIMIT ?"
    )
    return select(conn, DeliveryRow, where, now, holder, now, limit)


def delivery(conn: Any, delivery_id: str) -> DeliveryRow | None:
    return select_one(conn, DeliveryRow, "WHERE delivery_id = ?", delivery_id)


def next_due(conn: Any) -> str | None:
    """When the next owed delivery falls due (a retry, or a claim running out)."""
    row = conn.execute(
        "SELECT MIN(CASE WHEN progress = 'sending' THEN claim_until ELSE due_at END)"
        f" FROM push_outbox WHERE progress IN ({_OWED})"
    ).fetchone()
    return row[0] if row else None


def owed_count(conn: Any) -> int:
    """Deliveries neither delivered nor dead."""
    sql = f"SELECT COUNT(*) FROM push_outbox WHERE progress IN ({_OWED})"
    return int(conn.execute(sql).fetchone()[0])


def delivery_counts(conn: Any) -> dict[str, int]:
    """How many deliveries are at each step: queued, sending, waiting, delivered, dead."""
    rows = conn.execute("SELECT progress, count(*) FROM push_outbox GROUP BY progress").fetchall()
    counts = dict.fromkeys(("queued", "sending", "waiting", "delivered", "dead"), 0)
    return {**counts, **{str(p): int(n) for p, n in rows}}


def deliveries(conn: Any, task_id: str) -> list[DeliveryRow]:
    """A task's deliveries, in the order they were owed."""
    return select(conn, DeliveryRow, "WHERE task_id = ? ORDER BY cause, delivery_id", task_id)
