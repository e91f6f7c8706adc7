"""Reads of a run's live channel (``projections.channel``): the controls sent into a job and
what became of them, the questions its runs asked, and the totals ``/metrics`` reports."""

from __future__ import annotations

from typing import Any

import msgspec

from projections.rows import columns, decode


class ControlRow(msgspec.Struct, frozen=True, kw_only=True):
    """One control: ``control`` is its id (the log position of its ``job.control``), ``body``
    the JSON line the run is given, ``state`` pending, delivered or lost."""

    control: int
    action: str
    body: str
    sent_by: str
    state: str
    run_id: str | None
    reason: str | None
    recorded_at: str
    settled_at: str | None


class RequestRow(msgspec.Struct, frozen=True, kw_only=True):
    """One question a run asked: pending, answered (by control ``answer``) or dropped."""

    request: str
    question: str
    state: str
    answer: int | None
    asked_at: str
    answered_at: str | None


_CONTROLS = f"SELECT {columns(ControlRow)} FROM controls WHERE job_id = ?"


def pending_controls(conn: Any, job_id: str) -> list[ControlRow]:
    """A job's controls not yet delivered, in the order they were recorded."""
    rows = conn.execute(f"{_CONTROLS} AND state = 'pending' ORDER BY control", (job_id,))
    return decode(ControlRow, rows.fetchall())


def controls(conn: Any, job_id: str, limit: int = 100) -> list[ControlRow]:
    """A job's latest ``limit`` controls, newest first."""
    rows = conn.execute(f"{_CONTROLS} ORDER BY control DESC LIMIT ?", (job_id, limit))
    return decode(ControlRow, rows.fetchall())


def requests(conn: Any, job_id: str) -> list[RequestRow]:
    """A job's questions, oldest first."""
    rows = conn.execute(
        f"SELECT {columns(RequestRow)} FROM requests WHERE job_id = ? ORDER BY asked_position",
        (job_id,),
    )
    return decode(RequestRow, rows.fetchall())


def control_counts(conn: Any) -> dict[str, int]:
    """How many controls are pending, delivered and lost, over every job."""
    rows = conn.execute("SELECT state, count(*) FROM controls GROUP BY state").fetchall()
    return {"pending": 0, "delivered": 0, "lost": 0, **{str(s): int(n) for s, n in rows}}


def job_of_control_command(conn: Any, command_id: str) -> str | None:
    """The job a command (an idempotency key) sent a control into, if any."""
    rows = conn.execute(
        "SELECT job_id FROM controls WHERE command_id = ? LIMIT 1", (command_id,)
    ).fetchall()
    return str(rows[0][0]) if rows else None
