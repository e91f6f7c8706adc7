"""Accepting an A2A message (design.md §5.2, ADRs 0024, 0038): where it goes, and what it starts.

A message goes to a new task, or to the open task it names (or its context owes), into which it
is folded (``engine.domain.usecases.route``). When the task's live run is running and takes
input, the message is delivered into it and nothing is spawned (``usecases.deliver``). A new
run runs the agent of the message's context, whatever the message names (ADR 0048).
Otherwise a new run starts with all the task's messages in order on stdin, one per line, and
``FOLDLINE_TASK_MESSAGES`` = their count; the task stays working and completes once, with the
last run's result.

The run is spawned (with its stdin and environment) before the transaction that records it,
so the plan is read from the committed log first and checked again inside the transaction
against the task's version: a message that raced another one into the same task plans again
(``TaskMoved``, at most ``RETRIES`` times). A run that stopped taking input between the plan
and the write (it just ended) gets the superseding run instead (``NoChannel``).

The message's files are the caller's (``Files``): saved once the task is known, before the
run is told of them. A refusal is a ``MessageRefused`` naming the step it came from, which
the caller answers (the A2A surface: ``adapters.http.errors.RPC_ERRORS``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from adapters.services.dispatch import Dispatcher, DispatchFailed, new_id
from engine.domain import plans, usecases
from engine.domain.engine import DomainEngine
from engine.domain.errors import NoChannel, SessionNotFound, TaskEnded, TaskMoved, TaskNotFound
from engine.domain.push import PushConfig
from engine.errors import EngineError, InvalidArgument
from projections import queries

RETRIES = 5

# The steps a message is refused at: where it goes (its context, its task), the agent it
# names, starting (or delivering into) its run.
MESSAGE = "message"
AGENT = "agent"
LAUNCH = "launch"

# The domain's refusals of where a message goes; ``accept`` plans again on ``TaskMoved``.
WHERE_IT_GOES = (SessionNotFound, TaskNotFound, TaskEnded, TaskMoved)


class ReplayDiffers(InvalidArgument):
    """A message id sent before, with something else in it: a message id names one message,
    so the replay is refused rather than answered as the first one (nothing recorded)."""

    code = "message_replay_differs"


class MessageRefused(Exception):
    """The message was refused at ``step`` (``MESSAGE``, ``AGENT`` or ``LAUNCH``) because of
    ``error`` (an ``EngineError`` or a ``DispatchFailed``); nothing of it was recorded."""

    def __init__(self, step: str, error: Exception) -> None:
        super().__init__(step, error)
        self.step = step
        self.error = error


@dataclass(frozen=True)
class Message:
    """What an A2A message says: its ids, its text, the agent and interrupt its metadata
    asks for, and the push config its send configures."""

    message_id: str
    context_id: str | None
    task_id: str | None
    text: str
    agent: str = ""
    interrupt: bool = False
    push: PushConfig | None = None


def _runs_session_agent(
    request: usecases.TaskMessage, session_agent: str | None
) -> usecases.TaskMessage:
    """A context keeps the agent it was created with (ADR 0048): a message on an existing
    one runs it, and one naming another records that name as ignored (on its job)."""
    if session_agent is None:
        return request
    named = request.agent
    ignored = named if named and named != session_agent else ""
    return replace(request, agent=session_agent, agent_ignored=ignored)


class Files(Protocol):
    """The message's files, as its caller holds them."""

    @property
    def present(self) -> bool:
        """Whether the message has any."""
        ...

    def told(self, text: str, task_id: str) -> tuple[str, dict[str, str]]:
        """``text`` with a line per file, and the run's environment naming their manifest,
        once they are saved for ``task_id`` (at most once per task; both unchanged without
        files)."""
        ...


class TaskMessages:
    """Accepts A2A messages into tasks over this process's engine, starting runs through the
    dispatcher."""

    def __init__(self, engine: Callable[[], DomainEngine], jobs: Dispatcher) -> None:
        self._engine = engine
        self._jobs = jobs

    def accept(self, message: Message, files: Files) -> str:
        """Record the message's work and start its run; a known messageId answers its task
        again (and saves no files). Returns the task id.

        Raises:
            MessageRefused: where it goes, its agent or its run was refused.
        """
        request = usecases.TaskMessage(
            session_id=message.context_id or self._context_of(message.task_id) or new_id("a2a"),
            session_named=message.context_id is not None,
            task_named=message.task_id,
            message_id=message.message_id,
            text=message.text,
            agent=message.agent,
            new_task_id=new_id("task"),
            session_run_id=new_id("run"),
            interrupt=message.interrupt,
            push=message.push,
        )
        try:
            for _ in range(RETRIES - 1):
                with contextlib.suppress(TaskMoved):  # the task changed under the plan
                    return self._attempt(request, files)
            return self._attempt(request, files)  # the last try: a TaskMoved now is refused
        except WHERE_IT_GOES as ex:
            raise MessageRefused(MESSAGE, ex) from None

    def _context_of(self, task_id: str | None) -> str | None:
        """A ``taskId`` without a ``contextId`` is in its task's context."""
        if not task_id:
            return None
        record = queries.task(self._engine().log.connection(), task_id)
        return record.session_id if record is not None else None

    def _attempt(self, request: usecases.TaskMessage, files: Files) -> str:
        """Deliver into the task's listening run, or plan the new run's stdin from the
        committed log and launch it; ``TaskMoved``: plan again. A repeat returns before any
        file is saved."""
        engine = self._engine()
        route = usecases.route(engine, request)
        if route.replay is not None:
            return self._replayed(request, files, route.replay)
        says_something = bool(request.text) or files.present
        if route.task is not None and route.listening is not None and says_something:
            # A live run: the message's text says it all (a line per file in it).
            text, _ = files.told(request.text, route.task.task_id)
            planned = replace(
                request,
                text=text,
                planned_task=route.task.task_id,
                planned_version=route.task.version,
            )
            try:
                return self._deliver(planned)
            except NoChannel:  # its run just stopped taking input: a new run, planned afresh
                route = usecases.route(engine, request)
                if route.replay is not None:
                    return self._replayed(request, files, route.replay)
        task_id = route.task.task_id if route.task is not None else request.new_task_id
        request = _runs_session_agent(request, plans.session_agent(engine, request.session_id))
        text, env = files.told(request.text, task_id)
        request = replace(request, text=text)
        messages: tuple[str, ...] = (request.text,)
        version = 0
        if route.task is not None:
            record = queries.task(engine.log.connection(), route.task.task_id)
            if record is None:  # the view saw it: only a projection rebuild could get here
                raise TaskMoved(f"task {route.task.task_id} is gone", task_id=route.task.task_id)
            messages = (*(t for _, t in record.messages()), request.text)
            version = record.version
        planned = replace(
            request,
            planned_task=route.task.task_id if route.task else None,
            planned_version=version,
        )
        return self._launch(planned, messages, env)

    def _replayed(
        self, request: usecases.TaskMessage, files: Files, replay: usecases.Started
    ) -> str:
        """The task a message sent before went into, if this send says what the first one
        said: the same context and task (where it names them), the same text (the first
        one's file lines aside, when it has files) and no push config the task lacks.

        Raises:
            ReplayDiffers: what differs, by the A2A field names (nothing recorded).
        """
        task_id = str(replay.task_id)
        conn = self._engine().log.connection()
        record = queries.task(conn, task_id)
        if record is None:  # only a projection rebuild could get here: the first one stands
            return task_id
        differs = []
        if request.session_named and request.session_id != record.session_id:
            differs.append("contextId")
        if request.task_named and request.task_named != task_id:
            differs.append("taskId")
        said = dict(record.messages()).get(request.message_id)
        if said is not None and not _same_text(said, request.text, files.present):
            differs.append("parts")
        push = request.push
        if push is not None and not any(
            (row.url, row.token) == (push.url, push.token)
            for row in queries.push_configs(conn, task_id)
        ):
            differs.append("configuration.taskPushNotificationConfig")
        if differs:
            raise MessageRefused(
                MESSAGE,
                ReplayDiffers(
                    f"messageId {request.message_id} was sent before with another "
                    f"{', '.join(differs)}; a message id names one message",
                    message_id=request.message_id,
                    differs=differs,
                ),
            )
        return task_id

    def _deliver(self, request: usecases.TaskMessage) -> str:
        try:
            return str(usecases.deliver(self._engine(), request).task_id)
        except (*WHERE_IT_GOES, NoChannel):
            raise  # ``accept`` refuses them; ``_attempt`` starts a run instead
        except EngineError as ex:  # the control's limits (an empty message), or the server's
            raise MessageRefused(LAUNCH, ex) from None

    def _launch(
        self,
        request: usecases.TaskMessage,
        messages: tuple[str, ...],
        files_env: dict[str, str],
    ) -> str:
        try:  # the agent it names, even if its session runs another (ADR 0048)
            self._engine().settings.agent(request.agent_ignored or request.agent)
        except InvalidArgument as ex:  # an unknown agent: the message's params
            raise MessageRefused(AGENT, ex) from None
        stdin = "\n".join(messages).encode()
        env = {**files_env, "FOLDLINE_TASK_MESSAGES": str(len(messages))}
        try:
            started = self._jobs.launch(
                request.session_id,
                stdin,
                request.agent,
                lambda job_ids: replace(request, job_id=job_ids[0]),
                env=env,
            )
        except WHERE_IT_GOES:
            raise  # where the message goes: ``accept`` refuses them
        except (EngineError, DispatchFailed) as ex:  # the run's refusal, or the server's fault
            raise MessageRefused(LAUNCH, ex) from None
        return str(started.task_id)


def _same_text(recorded: str, text: str, with_files: bool) -> bool:
    """Whether a replay's text is the recorded one's: equal, or, for a message with files,
    the recorded text before the line per file it was given (all of it, without a text)."""
    return recorded == text or (with_files and (not text or recorded.startswith(f"{text}\n")))
