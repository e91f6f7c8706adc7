"""What the HTTP resources may use of a runtime: narrow ports, declared here once.

A resource names the port it needs and nothing else reaches it: no resource holds the log, a
connection of it, or the engine, and none starts work but through a named use case.

- ``ReadRuntime``: the reads every surface makes (``/v1`` reads, the console's JSON, the
  events feed). Implemented by the server's runtime (``adapters.runtime.Runtime``) and by the
  read-only console's (``adapters.console_server.ReadOnlyRuntime``).
- ``ServerRuntime``: what the writing server's resources need besides: the lease, commands,
  and the runtime's named services (dispatch, integration, accepting A2A messages, session
  wind-down). Implemented by ``adapters.runtime.Runtime``.

Both are structural (``typing.Protocol``): the runtimes do not import this module, and mypy
checks that they fit where the apps are built. The reads return the typed rows of
``projections.queries`` (``projections.reads.ReadModels`` binds them to a log);
``tests/arch/test_ports.py`` keeps resources from reaching past these ports.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from engine.domain.rows import JobRow, LeaseRow, PushConfigRow, SessionRow, TaskRow
from engine.events import RecordedEvent
from engine.machines import StreamHead
from projections import console_queries, queries

# -- reads: both runtimes -----------------------------------------------------------------------


class EventFeed(Protocol):
    """The log's committed events: pages, a stream's history, and waiting for a commit
    (``adapters.http.follow``). ``engine.log.Log`` is one."""

    def head(self) -> int: ...

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]: ...

    def read_stream(self, stream_id: str, after_version: int = 0) -> list[RecordedEvent]: ...

    def stream_head(self, stream_id: str) -> StreamHead: ...

    def wait_for(self, after_position: int, timeout: float) -> bool: ...


class SessionReads(Protocol):
    def session(self, session_id: str) -> SessionRow | None: ...

    def sessions_page(self, state: str | None, after: str | None, limit: int) -> queries.Page: ...

    def session_controller(self, session_id: str) -> SessionRow | None: ...


class JobReads(Protocol):
    def job(self, job_id: str) -> JobRow | None: ...

    def job_body(self, job_id: str) -> JobRow | None: ...

    def jobs_page(
        self,
        session_id: str | None,
        state: str | None,
        after: str | None,
        limit: int,
        parent_job: str | None = None,
    ) -> queries.Page: ...

    def jobs_by_id(self, job_ids: list[str]) -> list[JobRow]: ...

    def run_process(self, job_id: str) -> JobRow | None: ...

    def run_caller(self, token_digest: str) -> JobRow | None: ...

    def find_invocation(self, key: str) -> str | None: ...

    def job_of_control_command(self, command_id: str) -> str | None: ...

    def controls(self, job_id: str) -> list[queries.ControlRow]: ...

    def requests(self, job_id: str) -> list[queries.RequestRow]: ...


class TaskReads(Protocol):
    def task(self, task_id: str) -> TaskRow | None: ...

    def count_tasks(self, session_id: str | None, state: str | None) -> int: ...

    def tasks_newest_first(
        self,
        session_id: str | None,
        state: str | None,
        before: tuple[str, str] | None,
        limit: int,
    ) -> list[TaskRow]: ...

    def task_jobs(self, task_id: str) -> list[str]: ...

    def push_configs(self, task_id: str) -> list[PushConfigRow]: ...

    def push_config(self, task_id: str, config_id: str) -> PushConfigRow | None: ...


class LogFigures(Protocol):
    """The lease and the counts ``/metrics`` reports."""

    def leases(self) -> list[LeaseRow]: ...

    def lease(self, name: str) -> LeaseRow | None: ...

    def stream_counts(self) -> list[queries.StateCount]: ...

    def log_head(self) -> int: ...

    def lost_notifies(self) -> int: ...

    def control_counts(self) -> dict[str, int]: ...

    def delivery_counts(self) -> dict[str, int]: ...


class ConsoleReads(Protocol):
    """The console's pages (``projections.console_queries``; ``QueryError``: a bad filter)."""

    def overview(self) -> console_queries.Overview: ...

    def list_entities(
        self, table: str, filters: console_queries.Filters, after: str | None, limit: int
    ) -> console_queries.ListPage: ...

    def entity(self, kind: str, entity_id: str) -> console_queries.Entity | None: ...

    def log_page(
        self, before: int | None, kinds: Sequence[str], event_type: str | None, limit: int
    ) -> console_queries.LogPage: ...

    def export_rows(self, first: int, last: int) -> Iterator[tuple[Any, ...]]: ...


class Reads(SessionReads, JobReads, TaskReads, LogFigures, ConsoleReads, Protocol):
    """Every typed read a resource makes of the read models."""


class StreamSettings(Protocol):
    @property
    def sse_keepalive_s(self) -> float: ...


class ReadRuntime(Protocol):
    """The reads every surface makes: both runtimes. Opening the log on first need is the
    runtime's affair (``reads`` and ``events`` may raise ``LogMissing``)."""

    @property
    def config(self) -> StreamSettings: ...

    @property
    def reads(self) -> Reads: ...

    @property
    def events(self) -> EventFeed: ...

    def ending(self) -> bool:
        """Whether long waits and streams should end now (the server stops, or the log is
        gone)."""
        ...

    def open_stream(self) -> AbstractContextManager[None]:
        """Count an open SSE stream (``/metrics``) while the block runs."""
        ...
