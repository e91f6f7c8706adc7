"""The read models' typed queries, bound to one open log: the HTTP resources' reads.

A runtime hands a ``ReadModels`` to its resources as their reads port
(``adapters.http.ports.Reads``).

Each method runs one query of ``projections.queries`` (or ``projections.console_queries``) on
the calling thread's read connection and returns its typed rows: a resource never holds a
connection, and never sees SQL. Bound to a ``Log`` that is open read-write (the server's) or
read-only (``foldline console DB``); nothing here writes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from engine.domain.retention import RetiredRow
from engine.domain.rows import JobRow, LeaseRow, PushConfigRow, SessionRow, TaskRow
from engine.log import Log
from projections import console_queries, queries


class ReadModels:
    """The typed reads of one log, each on the calling thread's connection."""

    __slots__ = ("_log",)

    def __init__(self, log: Log) -> None:
        self._log = log

    def _conn(self) -> Any:
        return self._log.connection()

    # -- sessions -----------------------------------------------------------------------------

    def session(self, session_id: str) -> SessionRow | None:
        return queries.session(self._conn(), session_id)

    def sessions_page(self, state: str | None, after: str | None, limit: int) -> queries.Page:
        return queries.sessions_page(self._conn(), state, after, limit)

    def session_controller(self, session_id: str) -> SessionRow | None:
        return queries.session_controller(self._conn(), session_id)

    # -- jobs ---------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobRow | None:
        return queries.job(self._conn(), job_id)

    def job_body(self, job_id: str) -> JobRow | None:
        return queries.job_body(self._conn(), job_id)

    def retired(self, kind: str, entity_id: str) -> RetiredRow | None:
        return queries.retired(self._conn(), kind, entity_id)

    def live_below(self, job_id: str) -> int:
        return queries.live_below(self._conn(), job_id)

    def jobs_page(
        self,
        session_id: str | None,
        state: str | None,
        after: str | None,
        limit: int,
        parent_job: str | None = None,
    ) -> queries.Page:
        return queries.jobs_page(self._conn(), session_id, state, after, limit, parent_job)

    def jobs_by_id(self, job_ids: list[str]) -> list[JobRow]:
        return queries.jobs_by_id(self._conn(), job_ids)

    def run_process(self, job_id: str) -> JobRow | None:
        return queries.run_process(self._conn(), job_id)

    def run_caller(self, token_digest: str) -> JobRow | None:
        return queries.run_caller(self._conn(), token_digest)

    def find_invocation(self, key: str) -> str | None:
        return queries.find_invocation(self._conn(), key)

    def job_of_control_command(self, command_id: str) -> str | None:
        return queries.job_of_control_command(self._conn(), command_id)

    def controls(self, job_id: str) -> list[queries.ControlRow]:
        return queries.controls(self._conn(), job_id)

    def requests(self, job_id: str) -> list[queries.RequestRow]:
        return queries.requests(self._conn(), job_id)

    # -- A2A tasks ----------------------------------------------------------------------------

    def task(self, task_id: str) -> TaskRow | None:
        return queries.task(self._conn(), task_id)

    def count_tasks(
        self, session_id: str | None, state: str | None, updated_after: str | None = None
    ) -> int:
        return queries.count_tasks(self._conn(), session_id, state, updated_after)

    def tasks_last_updated_first(
        self,
        session_id: str | None,
        state: str | None,
        updated_after: str | None,
        before: tuple[str, str] | None,
        limit: int,
    ) -> list[TaskRow]:
        return queries.tasks_last_updated_first(
            self._conn(), session_id, state, updated_after, before, limit
        )

    def task_jobs(self, task_id: str) -> list[str]:
        return queries.task_jobs(self._conn(), task_id)

    def push_configs(self, task_id: str) -> list[PushConfigRow]:
        return queries.push_configs(self._conn(), task_id)

    def push_config(self, task_id: str, config_id: str) -> PushConfigRow | None:
        return queries.push_config(self._conn(), task_id, config_id)

    # -- the lease and the log's figures ------------------------------------------------------

    def leases(self) -> list[LeaseRow]:
        return queries.leases(self._conn())

    def lease(self, name: str) -> LeaseRow | None:
        return queries.lease(self._conn(), name)

    def stream_counts(self) -> list[queries.StateCount]:
        return queries.stream_counts(self._conn())

    def log_head(self) -> int:
        return queries.log_head(self._conn())

    def lost_notifies(self) -> int:
        return queries.lost_notifies(self._conn())

    def control_counts(self) -> dict[str, int]:
        return queries.control_counts(self._conn())

    def delivery_counts(self) -> dict[str, int]:
        return queries.delivery_counts(self._conn())

    # -- the console's pages ------------------------------------------------------------------

    def overview(self) -> console_queries.Overview:
        return console_queries.overview(self._conn())

    def list_entities(
        self, table: str, filters: console_queries.Filters, after: str | None, limit: int
    ) -> console_queries.ListPage:
        return console_queries.list_entities(self._conn(), table, filters, after, limit)

    def entity(self, kind: str, entity_id: str) -> console_queries.Entity | None:
        return console_queries.entity(self._conn(), kind, entity_id)

    def log_page(
        self, before: int | None, kinds: Sequence[str], event_type: str | None, limit: int
    ) -> console_queries.LogPage:
        return console_queries.log_page(self._conn(), before, kinds, event_type, limit)

    def export_rows(self, first: int, last: int) -> Iterator[tuple[Any, ...]]:
        return console_queries.export_rows(self._conn(), first, last)
