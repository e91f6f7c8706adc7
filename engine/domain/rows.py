"""What the domain rules read: one row per entity, and the queries admission needs.

``DomainView`` is the port the rules are written against; ``projections.view`` implements it
with SQL over the read models, inside the write transaction, so every decision sees exactly
what has been committed before it plus what the same transaction appended.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from engine.domain.session import Owed


class LeaseRow(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    version: int
    state: str
    holder: str
    epoch: int
    renewed_at: str


class SessionRow(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    version: int
    state: str
    resource_group: str | None
    units: int
    tainted: bool
    owes: Owed | None
    detached_by: str | None
    requested: str | None
    has_controller: bool


class JobRow(msgspec.Struct, frozen=True, kw_only=True):
    job_id: str
    version: int
    state: str
    session_id: str
    parent_job: str | None
    depth: int
    resource_group: str | None
    units: int
    write_scope: tuple[str, ...]
    task_id: str | None = None
    agent: str = ""
    token_digest: str | None = None  # of the current run's token
    run_id: str | None = None  # the current run
    result_state: str | None = None  # engine.domain.result; "unread" once finished


class TaskRow(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    version: int
    state: str
    session_id: str


class DomainView(Protocol):
    def lease(self, name: str) -> LeaseRow | None: ...

    def session(self, session_id: str) -> SessionRow | None: ...

    def job(self, job_id: str) -> JobRow | None: ...

    def task(self, task_id: str) -> TaskRow | None: ...

    def job_of_command(self, command_id: str) -> JobRow | None:
        """The job a command (its idempotency key) accepted, if any."""
        ...

    def live_jobs(self, session_id: str) -> list[JobRow]:
        """Non-terminal jobs of a session, oldest first."""
        ...

    def open_tasks(self, session_id: str) -> list[TaskRow]:
        """Non-terminal tasks of a session, oldest first."""
        ...

    def live_descendants(self, job_id: str) -> list[JobRow]:
        """Non-terminal jobs below ``job_id`` in the lineage, parents before children."""
        ...

    def units_held(self, resource_group: str) -> int:
        """Units held by sessions and jobs of a group in capacity-holding states."""
        ...

    def write_scopes_held(self) -> list[tuple[str, str]]:
        """``(job_id, path)`` of every write scope held by a capacity-holding job."""
        ...

    def jobs_holding(
        self,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        parent_job: str | None = None,
        writers: bool = False,
    ) -> int:
        """How many capacity-holding jobs match every given filter (``writers``: only those
        with a write scope)."""
        ...
