"""The engine's ``DomainView`` port, implemented with SQL over the read models.

Used inside the write transaction, so what it returns includes the appends the same command
has already made.
"""

from __future__ import annotations

import json
from typing import Any

from engine.domain import job, session, task
from engine.domain.rows import JobRow, LeaseRow, SessionRow, TaskRow
from engine.domain.session import Owed


def _marks(values: Any) -> str:
    return ", ".join(f"'{v}'" for v in sorted(values))


_JOB_COLUMNS = (
    "job_id, version, state, session_id, parent_job, depth, resource_group, units, write_scope,"
    " task_id, agent, token_digest, result_state, run_id"
)
_TASK_COLUMNS = "task_id, version, state, session_id"
_LIVE_JOBS = _marks(job.LIVE_STATES)
_JOBS_HOLDING = _marks(job.HOLDS_CAPACITY)
_SESSIONS_HOLDING = _marks(session.HOLDS_CAPACITY)
_OPEN_TASKS = _marks(task.OPEN)


def _job_row(row: Any) -> JobRow:
    return JobRow(
        job_id=row[0],
        version=row[1],
        state=row[2],
        session_id=row[3],
        parent_job=row[4],
        depth=row[5],
        resource_group=row[6],
        units=row[7],
        write_scope=tuple(json.loads(row[8])),
        task_id=row[9],
        agent=row[10],
        token_digest=row[11],
        result_state=row[12],
        run_id=row[13],
    )


def _task_row(row: Any) -> TaskRow:
    return TaskRow(task_id=row[0], version=row[1], state=row[2], session_id=row[3])


class SqlDomainView:
    def __init__(self, cursor: Any) -> None:
        self._cur = cursor

    def _one(self, sql: str, *params: Any) -> Any:
        rows = self._cur.execute(sql, params).fetchall()
        return rows[0] if rows else None

    def lease(self, name: str) -> LeaseRow | None:
        row = self._one(
            "SELECT name, version, state, holder, epoch, renewed_at FROM leases WHERE name = ?",
            name,
        )
        if row is None:
            return None
        return LeaseRow(
            name=row[0],
            version=row[1],
            state=row[2],
            holder=row[3],
            epoch=row[4],
            renewed_at=row[5],
        )

    def session(self, session_id: str) -> SessionRow | None:
        row = self._one(
            "SELECT session_id, version, state, resource_group, units, tainted, owes_kind,"
            " owes_ref, detached_by, requested, has_controller FROM sessions"
            " WHERE session_id = ?",
            session_id,
        )
        if row is None:
            return None
        return SessionRow(
            session_id=row[0],
            version=row[1],
            state=row[2],
            resource_group=row[3],
            units=row[4],
            tainted=bool(row[5]),
            owes=Owed(row[6], row[7]) if row[6] else None,
            detached_by=row[8],
            requested=row[9],
            has_controller=bool(row[10]),
        )

    def job(self, job_id: str) -> JobRow | None:
        row = self._one(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ?", job_id)
        return _job_row(row) if row else None

    def job_of_command(self, command_id: str) -> JobRow | None:
        row = self._one(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE command_id = ?", command_id)
        return _job_row(row) if row else None

    def task(self, task_id: str) -> TaskRow | None:
        row = self._one(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE task_id = ?", task_id)
        return _task_row(row) if row else None

    def live_jobs(self, session_id: str) -> list[JobRow]:
        rows = self._cur.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE session_id = ? AND state IN ({_LIVE_JOBS})"
            " ORDER BY accepted_position",
            (session_id,),
        ).fetchall()
        return [_job_row(row) for row in rows]

    def open_tasks(self, session_id: str) -> list[TaskRow]:
        rows = self._cur.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE session_id = ?"
            f" AND state IN ({_OPEN_TASKS}) ORDER BY created_at, task_id",
            (session_id,),
        ).fetchall()
        return [_task_row(row) for row in rows]

    def live_descendants(self, job_id: str) -> list[JobRow]:
        rows = self._cur.execute(
            "WITH RECURSIVE below (job_id) AS ("
            " SELECT job_id FROM jobs WHERE parent_job = ?"
            " UNION SELECT j.job_id FROM jobs j JOIN below b ON j.parent_job = b.job_id)"
            f" SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id IN (SELECT job_id FROM below)"
            f" AND state IN ({_LIVE_JOBS}) ORDER BY depth, accepted_position",
            (job_id,),
        ).fetchall()
        return [_job_row(row) for row in rows]

    def units_held(self, resource_group: str) -> int:
        row = self._one(
            "SELECT (SELECT coalesce(sum(units), 0) FROM sessions WHERE resource_group = ?"
            f" AND state IN ({_SESSIONS_HOLDING})) + (SELECT coalesce(sum(units), 0) FROM jobs"
            f" WHERE resource_group = ? AND state IN ({_JOBS_HOLDING}))",
            resource_group,
            resource_group,
        )
        return int(row[0])

    def write_scopes_held(self) -> list[tuple[str, str]]:
        rows = self._cur.execute(
            f"SELECT job_id, write_scope FROM jobs WHERE state IN ({_JOBS_HOLDING})"
            " AND write_scope != '[]'"
        ).fetchall()
        return [(job_id, path) for job_id, scope in rows for path in json.loads(scope)]

    def jobs_holding(
        self,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        parent_job: str | None = None,
        writers: bool = False,
    ) -> int:
        filters = {"agent": agent, "session_id": session_id, "parent_job": parent_job}
        where = [f"{name} = ?" for name, value in filters.items() if value is not None]
        params = [value for value in filters.values() if value is not None]
        if writers:
            where.append("write_scope != '[]'")
        row = self._one(
            f"SELECT count(*) FROM jobs WHERE state IN ({_JOBS_HOLDING})"
            + "".join(f" AND {w}" for w in where),
            *params,
        )
        return int(row[0])
