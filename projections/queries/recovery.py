"""What recovery, wind-down and the busy state read: runs cut off, sessions caught starting or
closing, live jobs' processes, notify hooks that never ended, suspended work still owed,
integrations caught between their intent and its end, and writers' worktrees to sweep."""

from __future__ import annotations

from typing import Any

import msgspec

from engine.domain.job import TERMINAL as JOB_TERMINAL
from engine.domain.job import JobState as J
from engine.domain.rows import JobRow, SessionRow
from engine.domain.session import SessionState as S
from engine.domain.task import TaskState as T
from projections.rows import NOTIFY_LOST, decode, select


def _marks(values: Any) -> str:
    return ", ".join(f"'{v}'" for v in sorted(str(v) for v in values))


def _scalar(conn: Any, sql: str, *params: Any) -> Any:
    return conn.execute(sql, params).fetchall()[0][0]


# -- runs -------------------------------------------------------------------------------------


class Run(msgspec.Struct, frozen=True):
    kind: str
    entity_id: str
    pid: int
    start_token: str
    epoch: int


_RUN = "SELECT kind, entity_id, pid, start_token, epoch FROM runs"


def runs(conn: Any) -> list[Run]:
    """Runs started and not ended, oldest first: after a crash, the ones cut off."""
    return decode(Run, conn.execute(f"{_RUN} ORDER BY started_at").fetchall())


def session_runs(conn: Any) -> list[Run]:
    return decode(Run, conn.execute(f"{_RUN} WHERE kind = 'session'").fetchall())


def runs_before_epoch(conn: Any, epoch: int) -> int:
    return int(_scalar(conn, "SELECT count(*) FROM runs WHERE epoch < ?", epoch))


# -- sessions and jobs between states ---------------------------------------------------------

CLOSING_OR_STARTING = (S.STARTING, S.FINISHING, S.STOPPING, S.CANCELLING)


def controlled_sessions_in_transition(conn: Any) -> list[SessionRow]:
    """Sessions recording a controller that are starting or closing: recovery times them out."""
    return select(
        conn,
        SessionRow,
        f"WHERE has_controller = 1 AND state IN ({_marks(CLOSING_OR_STARTING)})",
    )


def live_processes(conn: Any, session_id: str) -> list[JobRow]:
    """The session's live jobs (not terminal), oldest first, with their recorded process."""
    return select(
        conn,
        JobRow,
        f"WHERE session_id = ? AND state NOT IN ({_marks(JOB_TERMINAL)})"
        " ORDER BY accepted_position",
        session_id,
    )


def run_process(conn: Any, job_id: str) -> JobRow | None:
    """A job with its recorded process: what a graceful stop signals, what continue checks."""
    found = select(conn, JobRow, "WHERE job_id = ?", job_id)
    return found[0] if found else None


def busy(conn: Any) -> bool:
    """Work in flight: a job running or being cancelled, or a notify hook not yet finished."""
    return bool(
        _scalar(
            conn,
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN"
            f" ({_marks([J.RUNNING, J.CANCELLING])}))"
            " OR EXISTS (SELECT 1 FROM jobs WHERE notify_pid IS NOT NULL AND notify_ms IS NULL)",
        )
    )


# -- notify hooks -----------------------------------------------------------------------------


class PendingNotify(msgspec.Struct, frozen=True):
    job_id: str
    notify_pid: int


def pending_notifies(conn: Any) -> list[PendingNotify]:
    """Notify hooks that started and never recorded their end."""
    sql = "SELECT job_id, notify_pid FROM jobs WHERE notify_pid IS NOT NULL AND notify_ms IS NULL"
    return decode(PendingNotify, conn.execute(sql).fetchall())


def lost_notifies(conn: Any) -> int:
    """Notify hooks recorded ``job.notify_lost``: cut off by a crash, never run again (a hook
    killed at its cap records an exit code)."""
    return int(_scalar(conn, f"SELECT count(*) FROM jobs WHERE {NOTIFY_LOST}"))


# -- suspended work still owed ----------------------------------------------------------------


def resumable_jobs(conn: Any, cut_off: str) -> list[str]:
    """Jobs a crash cut off (suspended with the reason ``cut_off``) that recovery starts again,
    oldest first: the one their session owes, or one working for an A2A task that is still
    open; and below an owed job that is settling (ADR 0050), or below a job of such a subtree
    that ended, the cut-off jobs nobody else could continue, since no run above them is left
    (ADR 0058). The workers of a resumed job are not: they wait, suspended, for a continue
    from it (or the operator), so a root that plans again does not race its old workers. A
    job suspended for any other reason (a paused run cut off, a run lost while the server
    lived) waits for a continue too."""
    suspended = f"j.state = '{J.SUSPENDED}' AND coalesce(j.reason, '') = ?"
    rows = conn.execute(
        "WITH RECURSIVE wanted (job_id) AS ("
        " SELECT j.job_id FROM jobs j JOIN sessions s ON s.session_id = j.session_id"
        " LEFT JOIN tasks t ON t.task_id = j.task_id"
        f" WHERE ({suspended} OR j.state = '{J.SETTLING}')"
        " AND ((s.owes_kind = 'job' AND s.owes_ref = j.job_id)"
        f" OR t.state IN ({_marks([T.SUBMITTED, T.WORKING])}))"
        " UNION SELECT j.job_id FROM jobs j JOIN wanted w ON j.parent_job = w.job_id"
        " JOIN jobs p ON p.job_id = w.job_id"
        f" WHERE p.state IN ({_marks([J.SETTLING, *JOB_TERMINAL])}))"
        " SELECT j.job_id FROM jobs j JOIN wanted w ON w.job_id = j.job_id"
        f" WHERE {suspended} ORDER BY j.accepted_position",
        (cut_off, cut_off),
    ).fetchall()
    return [row[0] for row in rows]


# -- writers' worktrees and integrations --------------------------------------------------------


def integrations_in_flight(conn: Any) -> list[JobRow]:
    """Jobs whose result is ``integrating``: an intent recorded (``row.integration``), neither
    confirmed nor undone. After a crash, recovery compares the working tree with each intent's
    trees and confirms (tree == after) or undoes (writes before); at most one, as the workspace
    is integrated one at a time."""
    return select(conn, JobRow, "WHERE result_state = 'integrating' ORDER BY accepted_position")


class Worktree(msgspec.Struct, frozen=True):
    """A job's git worktree as the cleanup sweep needs it."""

    job_id: str
    worktree: str
    state: str
    session_id: str


def job_worktrees(conn: Any, *, terminal_only: bool = True) -> list[Worktree]:
    """Jobs that were given a git worktree (writers), oldest first; ``terminal_only``: only
    those that ended, whose worktree no run uses any more, so the sweep may remove it once
    its patch is captured. A live (or resumable) job keeps its worktree."""
    where = f" AND state IN ({_marks(JOB_TERMINAL)})" if terminal_only else ""
    return decode(
        Worktree,
        conn.execute(
            "SELECT job_id, worktree, state, session_id FROM jobs WHERE worktree IS NOT NULL"
            f"{where} ORDER BY accepted_position"
        ).fetchall(),
    )
