"""Every read the adapters and recovery make of the read models, as named functions.

Each takes ``conn`` (a connection, or the cursor of a write transaction: anything with
``execute``) and returns msgspec Structs decoded from the rows by column order
(``array_like``), never bare tuples indexed by position. Adapters hold no SQL: a read they need
gets a name here. Columns holding JSON text (``files``, ``taint_reasons``) stay text; the HTTP
encoders decode them where they shape the wire body.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, TypeVar

import msgspec

from engine.domain import ids
from engine.domain.job import TERMINAL as JOB_TERMINAL
from engine.domain.job import JobState as J
from engine.domain.lease import LeaseState
from engine.domain.session import SessionState as S
from engine.domain.task import TaskState as T

R = TypeVar("R")


class _Row(msgspec.Struct, array_like=True, frozen=True):
    """A row decoded by column order: the field order is the SELECT's column order."""

    computed: ClassVar[dict[str, str]] = {}
    """Fields that are no column of their own: the SQL expression each is selected as."""


def _columns(row_type: type[_Row]) -> str:
    return ", ".join(
        f"{row_type.computed[name]} AS {name}" if name in row_type.computed else name
        for name in row_type.__struct_fields__
    )


def _all(conn: Any, row_type: type[R], sql: str, *params: Any) -> list[R]:
    rows = conn.execute(sql, params).fetchall()
    # strict=False: SQLite stores booleans as 0/1.
    return msgspec.convert(rows, list[row_type], strict=False)  # type: ignore[valid-type]


def _one(conn: Any, row_type: type[R], sql: str, *params: Any) -> R | None:
    found = _all(conn, row_type, sql, *params)
    return found[0] if found else None


def _scalar(conn: Any, sql: str, *params: Any) -> Any:
    return conn.execute(sql, params).fetchall()[0][0]


def _marks(values: Any) -> str:
    return ", ".join(f"'{v}'" for v in sorted(str(v) for v in values))


# -- the log ----------------------------------------------------------------------------------


class StateCount(_Row, frozen=True):
    kind: str
    state: str
    count: int


def stream_counts(conn: Any) -> list[StateCount]:
    """Streams per kind and state, the source of the ``*_total`` gauges."""
    sql = "SELECT kind, state, count(*) FROM streams GROUP BY 1, 2 ORDER BY 1, 2"
    return _all(conn, StateCount, sql)


def log_head(conn: Any) -> int:
    """The last position in the log (0 when empty)."""
    return int(_scalar(conn, "SELECT coalesce(max(position), 0) FROM events"))


class Mark(_Row, frozen=True):
    """One event's place in the chain: what an anchor keeps of the log's head."""

    position: int
    hash: bytes
    recorded_at: str


def head_mark(conn: Any) -> Mark | None:
    """The last event's position, chain hash and time (None when the log is empty)."""
    return _one(
        conn, Mark, "SELECT position, hash, recorded_at FROM events ORDER BY position DESC LIMIT 1"
    )


def mark_at(conn: Any, position: int) -> Mark | None:
    """The event at ``position`` (None when the log does not reach it)."""
    return _one(
        conn, Mark, "SELECT position, hash, recorded_at FROM events WHERE position = ?", position
    )


# -- leases -----------------------------------------------------------------------------------


class LeaseRecord(_Row, frozen=True):
    name: str
    state: str
    version: int
    holder: str
    host: str
    pid: int
    epoch: int
    acquired_at: str
    renewed_at: str


class LeaseHolder(_Row, frozen=True):
    holder: str
    epoch: int
    state: str
    version: int
    renewed_at: str


def leases(conn: Any) -> list[LeaseRecord]:
    return _all(conn, LeaseRecord, f"SELECT {_columns(LeaseRecord)} FROM leases ORDER BY name")


def lease(conn: Any, name: str) -> LeaseHolder | None:
    """Who holds (or last held) the lease ``name``, at which epoch; None if never acquired."""
    return _one(
        conn, LeaseHolder, f"SELECT {_columns(LeaseHolder)} FROM leases WHERE name = ?", name
    )


def lease_held(conn: Any, name: str) -> LeaseHolder | None:
    """The lease's row only while it is held."""
    found = lease(conn, name)
    return found if found is not None and found.state == LeaseState.HELD else None


# -- sessions ---------------------------------------------------------------------------------


class SessionRecord(_Row, frozen=True):
    session_id: str
    state: str
    version: int
    agent: str
    origin: str
    resource_group: str | None
    units: int
    has_controller: bool
    run_id: str | None
    tainted: bool
    taint_reasons: str  # JSON list
    owes_kind: str | None
    owes_ref: str | None
    detached_by: str | None
    created_at: str
    updated_at: str
    finished_at: str | None


def session(conn: Any, session_id: str) -> SessionRecord | None:
    return _one(
        conn,
        SessionRecord,
        f"SELECT {_columns(SessionRecord)} FROM sessions WHERE session_id = ?",
        session_id,
    )


class Page(msgspec.Struct, frozen=True):
    """One keyset page of rows and the key to ask for the next one (None: the last page)."""

    rows: list[Any]
    next: str | None


def _page(
    conn: Any,
    row_type: type[_Row],
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
    rows = _all(
        conn,
        row_type,
        f"SELECT {_columns(row_type)} FROM {table} {clause} ORDER BY {key} LIMIT ?",
        *args,
        limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, getattr(rows[-1], key) if more else None)


def sessions_page(conn: Any, state: str | None, after: str | None, limit: int) -> Page:
    """Sessions in id order after ``after``, optionally of one state (rows: SessionRecord)."""
    return _page(conn, SessionRecord, "sessions", "session_id", {"state": state}, after, limit)


class Controller(_Row, frozen=True):
    has_controller: bool
    pid: int | None
    start_token: str | None


def session_controller(conn: Any, session_id: str) -> Controller | None:
    """The controller a session records (pid + start token), to check it is still alive."""
    return _one(
        conn,
        Controller,
        f"SELECT {_columns(Controller)} FROM sessions WHERE session_id = ?",
        session_id,
    )


class ControlledSession(_Row, frozen=True):
    session_id: str
    state: str
    run_id: str | None
    updated_at: str


CLOSING_OR_STARTING = (S.STARTING, S.FINISHING, S.STOPPING, S.CANCELLING)


def controlled_sessions_in_transition(conn: Any) -> list[ControlledSession]:
    """Sessions recording a controller that are starting or closing: recovery times them out."""
    return _all(
        conn,
        ControlledSession,
        f"SELECT {_columns(ControlledSession)} FROM sessions WHERE has_controller = 1"
        f" AND state IN ({_marks(CLOSING_OR_STARTING)})",
    )


# -- jobs -------------------------------------------------------------------------------------

# A hook that started and ended without an exit code: recorded job.notify_lost after a crash
# (a hook killed at its cap records one).
NOTIFY_LOST = "notify_pid IS NOT NULL AND notify_ms IS NOT NULL AND notify_exit_code IS NULL"


class JobRecord(_Row, frozen=True):
    job_id: str
    session_id: str
    state: str
    version: int
    agent: str
    parent_job: str | None
    depth: int
    batch: str | None
    resource_group: str | None
    units: int
    task_id: str | None
    run_id: str | None
    pid: int | None
    runs: int
    result: str | None
    files: str  # JSON list of {path, change}
    exit_code: int | None
    superseded_by: str | None
    reason: str | None
    notify_exit_code: int | None
    notify_lost: bool
    warnings: str  # JSON list of the run's WARNING: lines
    result_state: str | None
    result_reason: str | None
    result_sha256: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    updated_at: str

    computed: ClassVar[dict[str, str]] = {"notify_lost": NOTIFY_LOST}


def job(conn: Any, job_id: str) -> JobRecord | None:
    return _one(conn, JobRecord, f"SELECT {_columns(JobRecord)} FROM jobs WHERE job_id = ?", job_id)


def jobs_page(
    conn: Any,
    session_id: str | None,
    state: str | None,
    after: str | None,
    limit: int,
    parent_job: str | None = None,
) -> Page:
    """Jobs in id order after ``after``, optionally of one session, state and parent job
    (rows: JobRecord)."""
    filters = {"session_id": session_id, "state": state, "parent_job": parent_job}
    return _page(conn, JobRecord, "jobs", "job_id", filters, after, limit)


def jobs_by_id(conn: Any, job_ids: list[str]) -> list[JobRecord]:
    """The named jobs that exist, in the order given."""
    marks = ", ".join("?" for _ in job_ids)
    found = _all(
        conn,
        JobRecord,
        f"SELECT {_columns(JobRecord)} FROM jobs WHERE job_id IN ({marks})",
        *job_ids,
    )
    by_id = {record.job_id: record for record in found}
    return [by_id[job_id] for job_id in job_ids if job_id in by_id]


class RunProcess(_Row, frozen=True):
    """A live job's recorded process: what a graceful stop signals, what continue checks."""

    job_id: str
    state: str
    pid: int | None
    start_token: str | None
    paused_by: str | None


_ENDED = ", ".join(f"'{state}'" for state in sorted(JOB_TERMINAL))


def live_processes(conn: Any, session_id: str) -> list[RunProcess]:
    """The session's live jobs (not terminal), oldest first, with their recorded process."""
    return _all(
        conn,
        RunProcess,
        f"SELECT {_columns(RunProcess)} FROM jobs WHERE session_id = ?"
        f" AND state NOT IN ({_ENDED})"
        " ORDER BY accepted_position",
        session_id,
    )


def run_process(conn: Any, job_id: str) -> RunProcess | None:
    return _one(
        conn, RunProcess, f"SELECT {_columns(RunProcess)} FROM jobs WHERE job_id = ?", job_id
    )


class RunCaller(_Row, frozen=True):
    """The job whose current run holds a run token."""

    job_id: str
    session_id: str
    state: str


def run_caller(conn: Any, token_digest: str) -> RunCaller | None:
    """The running job whose current run's token has this sha256 (None: no live run has it)."""
    return _one(
        conn,
        RunCaller,
        f"SELECT {_columns(RunCaller)} FROM jobs WHERE token_digest = ? AND state = 'running'",
        token_digest,
    )


class JobBody(_Row, frozen=True):
    """What the AgentCore job body is made of."""

    job_id: str
    session_id: str
    command_id: str | None
    state: str
    result: str | None
    files: str  # JSON list
    started_at: str | None
    finished_at: str | None
    superseded_by: str | None
    warnings: str  # JSON list

    @property
    def caller_id(self) -> str | None:
        """The ``id`` the ``/invocations`` caller gave, if it came from there."""
        return ids.invocation_key(self.command_id)

    @property
    def terminal(self) -> bool:
        return self.state in JOB_TERMINAL


def job_body(conn: Any, job_id: str) -> JobBody | None:
    return _one(conn, JobBody, f"SELECT {_columns(JobBody)} FROM jobs WHERE job_id = ?", job_id)


def job_state(conn: Any, job_id: str) -> str | None:
    rows = conn.execute("SELECT state FROM jobs WHERE job_id = ?", (job_id,)).fetchall()
    return str(rows[0][0]) if rows else None


def job_session(conn: Any, job_id: str) -> str | None:
    rows = conn.execute("SELECT session_id FROM jobs WHERE job_id = ?", (job_id,)).fetchall()
    return str(rows[0][0]) if rows else None


def job_of_command(conn: Any, command_id: str) -> str | None:
    """The job a command accepted (its ``command_id``), if any."""
    rows = conn.execute("SELECT job_id FROM jobs WHERE command_id = ?", (command_id,)).fetchall()
    return str(rows[0][0]) if rows else None


def task_of_command(conn: Any, command_id: str) -> str | None:
    """The task whose job a command accepted, if any."""
    rows = conn.execute("SELECT task_id FROM jobs WHERE command_id = ?", (command_id,)).fetchall()
    return rows[0][0] if rows else None


def find_invocation(conn: Any, key: str) -> str | None:
    """An ``/invocations`` ``get``: the job id itself first, then the caller's ``id``."""
    rows = conn.execute("SELECT job_id FROM jobs WHERE job_id = ?", (key,)).fetchall()
    if rows:
        return str(rows[0][0])
    return job_of_command(conn, ids.invocation_command(key))


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


def last_job_update(conn: Any) -> str | None:
    return _scalar(conn, "SELECT max(updated_at) FROM jobs")  # type: ignore[no-any-return]


class PendingNotify(_Row, frozen=True):
    job_id: str
    notify_pid: int


def pending_notifies(conn: Any) -> list[PendingNotify]:
    """Notify hooks that started and never recorded their end."""
    return _all(
        conn,
        PendingNotify,
        "SELECT job_id, notify_pid FROM jobs WHERE notify_pid IS NOT NULL AND notify_ms IS NULL",
    )


def lost_notifies(conn: Any) -> int:
    """Notify hooks recorded ``job.notify_lost``: cut off by a crash, never run again (a hook
    killed at its cap records an exit code)."""
    return int(_scalar(conn, f"SELECT count(*) FROM jobs WHERE {NOTIFY_LOST}"))


def resumable_jobs(conn: Any, left_for_continue: str) -> list[str]:
    """Suspended jobs still wanted after a crash: the one their session owes, or one working for
    an A2A task that is still open, and the workers those spawned (their descendants, so a
    resumed root finds its batch running again), oldest first, so parents before children. Not
    those suspended with the reason ``left_for_continue`` (a paused run cut off: it waits for an
    operator's continue)."""
    cut_off = f"j.state = '{J.SUSPENDED}' AND coalesce(j.reason, '') != ?"
    rows = conn.execute(
        "WITH RECURSIVE wanted (job_id) AS ("
        " SELECT j.job_id FROM jobs j JOIN sessions s ON s.session_id = j.session_id"
        " LEFT JOIN tasks t ON t.task_id = j.task_id"
        f" WHERE {cut_off}"
        " AND ((s.owes_kind = 'job' AND s.owes_ref = j.job_id)"
        f" OR t.state IN ({_marks([T.SUBMITTED, T.WORKING])}))"
        " UNION SELECT j.job_id FROM jobs j JOIN wanted w ON j.parent_job = w.job_id"
        f" WHERE {cut_off})"
        " SELECT j.job_id FROM jobs j JOIN wanted w ON w.job_id = j.job_id"
        " ORDER BY j.accepted_position",
        (left_for_continue, left_for_continue),
    ).fetchall()
    return [row[0] for row in rows]


# -- runs -------------------------------------------------------------------------------------


class Run(_Row, frozen=True):
    kind: str
    entity_id: str
    pid: int
    start_token: str
    epoch: int


def runs(conn: Any) -> list[Run]:
    """Runs started and not ended, oldest first: after a crash, the ones cut off."""
    return _all(conn, Run, f"SELECT {_columns(Run)} FROM runs ORDER BY started_at")


def session_runs(conn: Any) -> list[Run]:
    return _all(conn, Run, f"SELECT {_columns(Run)} FROM runs WHERE kind = 'session'")


def runs_before_epoch(conn: Any, epoch: int) -> int:
    return int(_scalar(conn, "SELECT count(*) FROM runs WHERE epoch < ?", epoch))


# -- A2A tasks --------------------------------------------------------------------------------


class TaskRecord(_Row, frozen=True):
    task_id: str
    session_id: str
    state: str
    version: int
    message_id: str
    text: str
    status_text: str | None
    result: str | None
    followups: str  # JSON [[message_id, text], ...]: the messages after the first, in order
    created_at: str
    updated_at: str

    def messages(self) -> list[tuple[str, str]]:
        """Every message of the task, in order: (message id, text)."""
        later = [(str(m), str(t)) for m, t in json.loads(self.followups)]
        return [(self.message_id, self.text), *later]


def task(conn: Any, task_id: str) -> TaskRecord | None:
    return _one(
        conn, TaskRecord, f"SELECT {_columns(TaskRecord)} FROM tasks WHERE task_id = ?", task_id
    )


def _task_filter(session_id: str | None, state: str | None) -> tuple[list[str], list[Any]]:
    where, args = [], []
    if session_id is not None:
        where.append("session_id = ?")
        args.append(session_id)
    if state is not None:
        where.append("state = ?")
        args.append(state)
    return where, args


def count_tasks(conn: Any, session_id: str | None, state: str | None) -> int:
    where, args = _task_filter(session_id, state)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    return int(_scalar(conn, f"SELECT count(*) FROM tasks {clause}", *args))


def tasks_newest_first(
    conn: Any,
    session_id: str | None,
    state: str | None,
    before: tuple[str, str] | None,
    limit: int,
) -> list[TaskRecord]:
    """Tasks newest first, keyset-paged below ``before`` = (created_at, task_id)."""
    where, args = _task_filter(session_id, state)
    if before is not None:
        where.append("(created_at, task_id) < (?, ?)")
        args += list(before)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    return _all(
        conn,
        TaskRecord,
        f"SELECT {_columns(TaskRecord)} FROM tasks {clause}"
        " ORDER BY created_at DESC, task_id DESC LIMIT ?",
        *args,
        limit,
    )


def task_jobs(conn: Any, task_id: str) -> list[str]:
    """The jobs (runs) that worked for a task, oldest first: the last is the current one."""
    rows = conn.execute(
        "SELECT job_id FROM jobs WHERE task_id = ? ORDER BY created_at, job_id", (task_id,)
    ).fetchall()
    return [str(row[0]) for row in rows]
