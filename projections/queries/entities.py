"""Reads of the four entities' read models (leases, sessions, jobs, A2A tasks), each returning
its one row type from ``engine.domain.rows``, selected and decoded by ``projections.rows``."""

from __future__ import annotations

from typing import Any

import msgspec

from engine.domain import ids
from engine.domain.job import TERMINAL as JOB_TERMINAL
from engine.domain.lease import LeaseState
from engine.domain.rows import JobRow, LeaseRow, SessionRow, TaskRow
from projections.queries.retired import retired, retired_of_command
from projections.rows import columns, decode, select, select_one

# -- leases -----------------------------------------------------------------------------------


def leases(conn: Any) -> list[LeaseRow]:
    return select(conn, LeaseRow, "ORDER BY name")


def lease(conn: Any, name: str) -> LeaseRow | None:
    """Who holds (or last held) the lease ``name``, at which epoch; None if never acquired."""
    return select_one(conn, LeaseRow, "WHERE name = ?", name)


def lease_held(conn: Any, name: str) -> LeaseRow | None:
    """The lease's row only while it is held."""
    found = lease(conn, name)
    return found if found is not None and found.state == LeaseState.HELD else None


# -- pages ------------------------------------------------------------------------------------


class Page(msgspec.Struct, frozen=True):
    """One keyset page of rows and the key to ask for the next one (None: the last page)."""

    rows: list[Any]
    next: str | None


def _page(
    conn: Any,
    row_type: type[msgspec.Struct],
    table: str,
    key: str,
    filters: dict[str, str | None],
    after: str | None,
    limit: int,
) -> Page:
    where, args = [], []
    for column, value in filters.items():
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if after:
        where.append(f"{key} > ?")
        args.append(after)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    sql = f"SELECT {columns(row_type)} FROM {table} {clause} ORDER BY {key} LIMIT ?"
    rows = decode(row_type, conn.execute(sql, (*args, limit + 1)).fetchall())
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, getattr(rows[-1], key) if more else None)


# -- sessions ---------------------------------------------------------------------------------


def session(conn: Any, session_id: str) -> SessionRow | None:
    """The session's row; its controller (``pid``, ``start_token``) too, to check it lives."""
    return select_one(conn, SessionRow, "WHERE session_id = ?", session_id)


def session_controller(conn: Any, session_id: str) -> SessionRow | None:
    """The session with the controller it records (``pid``, ``start_token``), to check that
    it is still alive."""
    return session(conn, session_id)


def sessions_page(conn: Any, state: str | None, after: str | None, limit: int) -> Page:
    """Sessions in id order after ``after``, optionally of one state (rows: SessionRow)."""
    return _page(conn, SessionRow, "sessions", "session_id", {"state": state}, after, limit)


# -- jobs -------------------------------------------------------------------------------------


def job(conn: Any, job_id: str) -> JobRow | None:
    return select_one(conn, JobRow, "WHERE job_id = ?", job_id)


def job_body(conn: Any, job_id: str) -> JobRow | None:
    """The job an AgentCore job body is made of (``caller_id``, ``terminal``)."""
    return job(conn, job_id)


def live_below(conn: Any, job_id: str) -> int:
    """How many jobs below ``job_id`` in the lineage are live (not terminal): what a settling
    job waits for (ADR 0050)."""
    terminal = ", ".join(f"'{state}'" for state in sorted(JOB_TERMINAL))
    rows = conn.execute(
        "WITH RECURSIVE below (job_id) AS ("
        " SELECT job_id FROM jobs WHERE parent_job = ?"
        " UNION SELECT j.job_id FROM jobs j JOIN below b ON j.parent_job = b.job_id)"
        " SELECT count(*) FROM jobs WHERE job_id IN (SELECT job_id FROM below)"
        f" AND state NOT IN ({terminal})",
        (job_id,),
    ).fetchall()
    return int(rows[0][0])


def jobs_page(
    conn: Any,
    session_id: str | None,
    state: str | None,
    after: str | None,
    limit: int,
    parent_job: str | None = None,
) -> Page:
    """Jobs in id order after ``after``, optionally of one session, state and parent job
    (rows: JobRow)."""
    filters = {"session_id": session_id, "state": state, "parent_job": parent_job}
    return _page(conn, JobRow, "jobs", "job_id", filters, after, limit)


def jobs_by_id(conn: Any, job_ids: list[str]) -> list[JobRow]:
    """The named jobs that exist, in the order given."""
    marks = ", ".join("?" for _ in job_ids)
    found = select(conn, JobRow, f"WHERE job_id IN ({marks})", *job_ids)
    by_id = {record.job_id: record for record in found}
    return [by_id[job_id] for job_id in job_ids if job_id in by_id]


def run_caller(conn: Any, token_digest: str) -> JobRow | None:
    """The running job whose current run's token has this sha256 (None: no live run has it)."""
    return select_one(conn, JobRow, "WHERE token_digest = ? AND state = 'running'", token_digest)


class RootJob(msgspec.Struct, frozen=True):
    """One root job of a session as its history tells it (``adapters.services.run_given``):
    where its prompt is (the ``job.accepted`` event at ``accepted_position``), its state,
    times and reply."""

    job_id: str
    state: str
    agent: str
    accepted_position: int
    prompt_file: str
    result: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None


def session_root_jobs(conn: Any, session_id: str, before_job: str, limit: int) -> list[RootJob]:
    """The session's jobs without a parent accepted before ``before_job`` (all of them while
    it is not recorded), newest first, at most ``limit``."""
    sql = (
        "SELECT job_id, state, agent, accepted_position, prompt_file, result, created_at,"
        " started_at, finished_at FROM jobs WHERE session_id = ? AND parent_job IS NULL"
        " AND accepted_position < coalesce("
        "(SELECT accepted_position FROM jobs WHERE job_id = ?), 9223372036854775807)"
        " ORDER BY accepted_position DESC LIMIT ?"
    )
    return decode(RootJob, conn.execute(sql, (session_id, before_job, limit)).fetchall())


def job_state(conn: Any, job_id: str) -> str | None:
    rows = conn.execute("SELECT state FROM jobs WHERE job_id = ?", (job_id,)).fetchall()
    return str(rows[0][0]) if rows else None


def job_session(conn: Any, job_id: str) -> str | None:
    rows = conn.execute("SELECT session_id FROM jobs WHERE job_id = ?", (job_id,)).fetchall()
    return str(rows[0][0]) if rows else None


def job_of_command(conn: Any, command_id: str) -> str | None:
    """The job a command accepted (its ``command_id``), if any: retired ones too (a key is
    answered forever, ADR 0062)."""
    rows = conn.execute("SELECT job_id FROM jobs WHERE command_id = ?", (command_id,)).fetchall()
    return str(rows[0][0]) if rows else retired_of_command(conn, "job", command_id)


def task_of_command(conn: Any, command_id: str) -> str | None:
    """The task whose job a command accepted, if any."""
    rows = conn.execute("SELECT task_id FROM jobs WHERE command_id = ?", (command_id,)).fetchall()
    return rows[0][0] if rows else None


def find_invocation(conn: Any, key: str) -> str | None:
    """An ``/invocations`` ``get``: the job id itself first, then the caller's ``id``."""
    rows = conn.execute("SELECT job_id FROM jobs WHERE job_id = ?", (key,)).fetchall()
    if rows or retired(conn, "job", key) is not None:
        return key
    return job_of_command(conn, ids.invocation_command(key))


def last_job_update(conn: Any) -> str | None:
    return conn.execute("SELECT max(updated_at) FROM jobs").fetchall()[0][0]  # type: ignore[no-any-return]


# -- A2A tasks --------------------------------------------------------------------------------


def task(conn: Any, task_id: str) -> TaskRow | None:
    return select_one(conn, TaskRow, "WHERE task_id = ?", task_id)


def _task_filter(
    session_id: str | None, state: str | None, updated_after: str | None
) -> tuple[list[str], list[Any]]:
    where, args = [], []
    if session_id is not None:
        where.append("session_id = ?")
        args.append(session_id)
    if state is not None:
        where.append("state = ?")
        args.append(state)
    if updated_after is not None:  # the log's time form sorts like the time itself
        where.append("updated_at > ?")
        args.append(updated_after)
    return where, args


def count_tasks(
    conn: Any, session_id: str | None, state: str | None, updated_after: str | None = None
) -> int:
    where, args = _task_filter(session_id, state, updated_after)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    return int(conn.execute(f"SELECT count(*) FROM tasks {clause}", args).fetchall()[0][0])


def tasks_last_updated_first(
    conn: Any,
    session_id: str | None,
    state: str | None,
    updated_after: str | None,
    before: tuple[str, str] | None,
    limit: int,
) -> list[TaskRow]:
    """Tasks by their last update, newest first, keyset-paged below ``before`` =
    (updated_at, task_id): a task appears at most once in a listing, and every task not
    updated while it is read appears in it (one updated meanwhile moves to its top)."""
    where, args = _task_filter(session_id, state, updated_after)
    if before is not None:
        where.append("(updated_at, task_id) < (?, ?)")
        args += list(before)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    return select(
        conn, TaskRow, f"{clause} ORDER BY updated_at DESC, task_id DESC LIMIT ?", *args, limit
    )


def task_jobs(conn: Any, task_id: str) -> list[str]:
    """The jobs (runs) that worked for a task, oldest first: the last is the current one."""
    rows = conn.execute(
        "SELECT job_id FROM jobs WHERE task_id = ? ORDER BY created_at, job_id", (task_id,)
    ).fetchall()
    return [str(row[0]) for row in rows]
