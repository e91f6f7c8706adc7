"""The reads every aggregate's rules start with: an entity that must exist, at the version the
command pins."""

from __future__ import annotations

from typing import Any

from engine.domain import ids
from engine.domain.errors import NotFound, StaleRevision
from engine.domain.rows import JobRow, SessionRow, TaskRow
from engine.domain.rules.registry import Context
from engine.errors import ConcurrencyError


def session(ctx: Context, session_id: str) -> SessionRow:
    row = ctx.view.session(session_id)
    if row is None:
        raise NotFound(f"session {session_id!r} does not exist", session_id=session_id)
    return row


def job(ctx: Context, job_id: str) -> JobRow:
    row = ctx.view.job(job_id)
    if row is None:
        raise NotFound(f"job {job_id!r} does not exist", job_id=job_id)
    return row


def task(ctx: Context, task_id: str) -> TaskRow:
    row = ctx.view.task(task_id)
    if row is None:
        raise NotFound(f"task {task_id!r} does not exist", task_id=task_id)
    return row


def expect(command: Any, stream_id: str, version: int) -> None:
    """``If-Match``: a command may pin the version of the entity it targets."""
    expected = getattr(command, "expected_version", None)
    if expected is not None and expected != version:
        raise ConcurrencyError(stream_id, expected, version)


def expect_revision(expected: int | None, job: JobRow) -> None:
    """``If-Match`` on a job's control (ADR 0057): the control revision the caller saw (None:
    it named none) must still be the job's; output and the run's own signals never move it.

    Raises:
        StaleRevision: another control was recorded since (412; nothing is recorded).
    """
    if expected is not None and expected != job.control_revision:
        raise StaleRevision(
            f"job {job.job_id}: expected control revision {expected}, it is at"
            f" {job.control_revision}",
            job_id=job.job_id,
            expected=expected,
            actual=job.control_revision,
        )


def session_for(command: Any, ctx: Context) -> SessionRow:
    row = session(ctx, command.session_id)
    expect(command, ids.session(row.session_id), row.version)
    return row


def job_for(command: Any, ctx: Context) -> JobRow:
    row = job(ctx, command.job_id)
    expect(command, ids.job(row.job_id), row.version)
    return row


def task_for(command: Any, ctx: Context) -> TaskRow:
    row = task(ctx, command.task_id)
    expect(command, ids.task(row.task_id), row.version)
    return row
