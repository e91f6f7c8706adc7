"""What the HTTP resources may use of a runtime: narrow ports, declared here once.

A resource names the port it needs and nothing else reaches it: no resource holds the log, a
connection of it, or the engine, and none starts work but through a named use case.

- ``ReadRuntime``: the reads every surface makes (``/v1`` reads, the console's JSON, the
  events feed). Implemented by the server's runtime (``adapters.services.runtime.Runtime``)
  and by the read-only console's (``adapters.programs.console_server.ReadOnlyRuntime``).
- ``ServerRuntime``: what the writing server's resources need besides: the lease, commands,
  and the runtime's named services, each through a port of its own (dispatch, invocations,
  A2A messages, integration, session wind-down). Implemented by the server's runtime.

Both are structural (``typing.Protocol``): the runtimes do not import this module, and mypy
checks that they fit where the apps are built. The reads return the typed rows of
``projections.queries`` (``projections.reads.ReadModels`` binds them to a log);
``tests/arch/test_ports.py`` keeps resources from reaching past these ports.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from adapters.services.dispatch import Accepted, Spawn
from adapters.services.job_controls import Controller
from adapters.services.sandbox import Sandbox
from adapters.services.task_messages import Files, Message
from adapters.settings.config import ServerConfig
from engine.domain import commands as c
from engine.domain.retention import RetiredRow
from engine.domain.rows import JobRow, LeaseRow, PushConfigRow, SessionRow, TaskRow
from engine.engine import CommandResult
from engine.events import RecordedEvent
from engine.machines import StreamHead
from engine.write.context import LogStats
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

    def retired(self, kind: str, entity_id: str) -> RetiredRow | None: ...

    def live_below(self, job_id: str) -> int: ...

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

    def count_tasks(
        self, session_id: str | None, state: str | None, updated_after: str | None = None
    ) -> int: ...

    def tasks_last_updated_first(
        self,
        session_id: str | None,
        state: str | None,
        updated_after: str | None,
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


# -- the server's services ------------------------------------------------------------------------


class OperatorTokens(Protocol):
    @property
    def fixed(self) -> str | None: ...

    def current(self) -> str | None: ...


class Patches(Protocol):
    def read_patch(self, job_id: str, sha256: str) -> bytes: ...


class Dispatch(Protocol):
    """Starting jobs (``adapters.services.dispatch.Dispatcher``)."""

    @property
    def sandbox(self) -> Sandbox | None:
        """Who runs execute as (the owner of a message's saved files)."""
        ...

    @property
    def worktrees(self) -> Patches: ...

    def repeat(self, caller_id: str) -> str | None:
        """The job an invocation under ``caller_id`` made before, if any."""
        ...

    def spawn(
        self,
        session_id: str,
        items: list[Spawn],
        parent_job: str | None,
        token_digest: str | None,
    ) -> list[str]: ...

    def fork(self, source_id: str, extra_input: str, by: Controller) -> str: ...


class Invoking(Protocol):
    """An ``/invocations`` request (``adapters.services.invocations.Invocations``)."""

    def invoke(
        self,
        prompt: str,
        prompt_file: str,
        session_id: str | None,
        agent: str,
        caller_id: str | None,
        *,
        deliver: bool = True,
    ) -> Accepted: ...


class Messages(Protocol):
    """An A2A message (``adapters.services.task_messages.TaskMessages``)."""

    def accept(self, message: Message, files: Files) -> str: ...


class Integration(Protocol):
    """Applying a kept patch to the workspace (``adapters.services.integration.Integrator``)."""

    def integrate(
        self, job_id: str, caller_job: str | None, caller_digest: str | None, sha256: str | None
    ) -> None: ...


class Winddown(Protocol):
    """The session controls that take more than one step, and a cold job's relaunch
    (``adapters.services.winddown.Winddown``)."""

    def control_session(self, command: c.Command, grace_s: float | None = None) -> None: ...

    def is_relaunchable(self, job_id: str) -> bool: ...

    def relaunch(self, job_id: str, extra_input: str, by: Controller) -> None: ...


class ServerRuntime(ReadRuntime, Protocol):
    """What the writing server's resources use besides the reads."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def holder(self) -> str: ...

    @property
    def operator_token(self) -> OperatorTokens: ...

    @property
    def checkpoint_path(self) -> Path: ...

    @property
    def open_streams(self) -> int: ...

    @property
    def log_stats(self) -> LogStats: ...

    @property
    def jobs(self) -> Dispatch: ...

    @property
    def invocations(self) -> Invoking: ...

    @property
    def messages(self) -> Messages: ...

    @property
    def integration(self) -> Integration: ...

    @property
    def winddown(self) -> Winddown: ...

    def ensure_lease(self) -> None:
        """Hold the workspace lease before a write (``LeaseBusy`` while another holds it)."""
        ...

    def handle(self, command: c.Command) -> CommandResult:
        """Decide and record one command (the lease held first, by the caller)."""
        ...

    def check_log(self) -> None:
        """Raises ``LogMissing`` while the log cannot be written."""
        ...

    def log_missing(self) -> str | None: ...

    def judge_volume_again(self) -> None:
        """A shared-volume mode pending at boot, judged again (ADR 0042)."""
        ...

    def ping(self) -> dict[str, Any]:
        """``/ping``'s answer, from memory (never opens the log)."""
        ...
