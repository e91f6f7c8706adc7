"""The engine's ``DomainView`` port, implemented with SQL over the read models.

Used inside the write transaction, so what it returns includes the appends the same command
has already made.
"""

from __future__ import annotations

import json
from typing import Any

from engine.domain import job, session, task
from engine.domain.rows import (
    DeliveryRow,
    JobRow,
    LeaseRow,
    PushConfigRow,
    SessionRow,
    TaskRow,
)
from projections.rows import columns, decode, select_one


def _marks(values: Any) -> str:
    return ", ".join(f"'{v}'" for v in sorted(values))


_JOB_COLUMNS = columns(JobRow)
_LIVE_JOBS = _marks(job.LIVE_STATES)
# A job holds capacity in these states, but a cold pause whose run is gone holds nothing.
_JOBS_HOLDING = (
    f"state IN ({_marks(job.HOLDS_CAPACITY)}) AND coalesce(pause, '') != '{job.PAUSE_RETIRED}'"
)
_SESSIONS_HOLDING = _marks(session.HOLDS_CAPACITY)
_OPEN_TASKS = _marks(task.OPEN)


class SqlDomainView:
    def __init__(self, cursor: Any) -> None:
        self._cur = cursor

    def _one(self, sql: str, *params: Any) -> Any:
        rows = self._cur.execute(sql, params).fetchall()
        return rows[0] if rows else None

    def lease(self, name: str) -> LeaseRow | None:
        return select_one(self._cur, LeaseRow, "WHERE name = ?", name)

    def session(self, session_id: str) -> SessionRow | None:
        return select_one(self._cur, SessionRow, "WHERE session_id = ?", session_id)

    def job(self, job_id: str) -> JobRow | None:
        return select_one(self._cur, JobRow, "WHERE job_id = ?", job_id)

    def job_of_command(self, command_id: str) -> JobRow | None:
        return select_one(self._cur, JobRow, "WHERE command_id = ?", command_id)

    def job_controlled_by(self, command_id: str) -> JobRow | None:
        return select_one(
            self._cur,
            JobRow,
            "WHERE job_id = (SELECT job_id FROM controls WHERE command_id = ? LIMIT 1)",
            command_id,
        )

    def retired_job_of_command(self, command_id: str) -> str | None:
        rows = self._cur.execute(
            "SELECT entity_id FROM retired WHERE kind = 'job' AND (command_id = ? OR entity_id"
            " = (SELECT job_id FROM controls WHERE command_id = ? LIMIT 1))",
            (command_id, command_id),
        ).fetchall()
        return str(rows[0][0]) if rows else None

    def control_state(self, job_id: str, control: int) -> str | None:
        row = self._cur.execute(
            "SELECT state FROM controls WHERE job_id = ? AND control = ?", (job_id, control)
        ).fetchone()
        return None if row is None else str(row[0])

    def pending_requests(self, job_id: str) -> list[tuple[str, str]]:
        rows = self._cur.execute(
            "SELECT request, question FROM requests WHERE job_id = ? AND state = 'pending'"
            " ORDER BY asked_position",
            (job_id,),
        ).fetchall()
        return [(str(request), str(question)) for request, question in rows]

    def task(self, task_id: str) -> TaskRow | None:
        return select_one(self._cur, TaskRow, "WHERE task_id = ?", task_id)

    def push_config(self, task_id: str, config_id: str) -> PushConfigRow | None:
        where = "WHERE task_id = ? AND config_id = ?"
        return select_one(self._cur, PushConfigRow, where, task_id, config_id)

    def delivery(self, delivery_id: str) -> DeliveryRow | None:
        return select_one(self._cur, DeliveryRow, "WHERE delivery_id = ?", delivery_id)

    def deliveries_claimed(self, holder: str, now: str) -> int:
        sql = (
            "SELECT COUNT(*) FROM push_outbox"
            " WHERE progress = 'sending' AND holder = ? AND claim_until > ?"
        )
        return int(self._one(sql, holder, now)[0])

    def live_jobs(self, session_id: str) -> list[JobRow]:
        rows = self._cur.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE session_id = ? AND state IN ({_LIVE_JOBS})"
            " ORDER BY accepted_position",
            (session_id,),
        ).fetchall()
        return decode(JobRow, rows)

    def open_tasks(self, session_id: str) -> list[TaskRow]:
        rows = self._cur.execute(
            f"SELECT {columns(TaskRow)} FROM tasks WHERE session_id = ?"
            f" AND state IN ({_OPEN_TASKS}) ORDER BY created_at, task_id",
            (session_id,),
        ).fetchall()
        return decode(TaskRow, rows)

    def live_descendants(self, job_id: str) -> list[JobRow]:
        rows = self._cur.execute(
            "WITH RECURSIVE below (job_id) AS ("
            " SELECT job_id FROM jobs WHERE parent_job = ?"
            " UNION SELECT j.job_id FROM jobs j JOIN below b ON j.parent_job = b.job_id)"
            f" SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id IN (SELECT job_id FROM below)"
            f" AND state IN ({_LIVE_JOBS}) ORDER BY depth, accepted_position",
            (job_id,),
        ).fetchall()
        return decode(JobRow, rows)

    def units_held(self, resource_group: str) -> int:
        row = self._one(
            "SELECT (SELECT coalesce(sum(units), 0) FROM sessions WHERE resource_group = ?"
            f" AND state IN ({_SESSIONS_HOLDING})) + (SELECT coalesce(sum(units), 0) FROM jobs"
            f" WHERE resource_group = ? AND {_JOBS_HOLDING})",
            resource_group,
            resource_group,
        )
        return int(row[0])

    def jobs_integrating(self) -> list[str]:
        rows = self._cur.execute(
            "SELECT job_id FROM jobs WHERE result_state = 'integrating' ORDER BY job_id"
        ).fetchall()
        return [job_id for (job_id,) in rows]

    def write_scopes_held(self) -> list[tuple[str, str]]:
        rows = self._cur.execute(
            f"SELECT job_id, write_scope FROM jobs WHERE {_JOBS_HOLDING} AND write_scope != '[]'"
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
            f"SELECT count(*) FROM jobs WHERE {_JOBS_HOLDING}"
            + "".join(f" AND {w}" for w in where),
            *params,
        )
        return int(row[0])
