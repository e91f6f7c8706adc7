"""Where an A2A message goes (design.md §5.2, ADR 0024): a new task, or the open task it names (or
its context owes), into which it is folded.

A folded message is recorded on the task (``task.message_added``). When the task's live run is
running and takes input (ADR 0038), the message is delivered into it, and nothing is spawned:
as the answer to the run's pending question, else as a message (``halo/interrupt: true`` in
its metadata interrupts the active turn first). Otherwise the task's live run is superseded
and a new run starts with all the task's messages in order on stdin, one per line, and
``FOLDLINE_TASK_MESSAGES`` = their count; the task stays working and completes once, with the
last run's result. The run is spawned (with its stdin and environment) before the
transaction that records it, so the plan is read from the committed log first and checked
again inside the transaction against the task's version: a message that raced another one
into the same task plans again (optimistic concurrency, bounded). A run that stopped taking
input between the plan and the write (it just ended) gets the superseding run instead.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

from adapters.dispatch import DispatchFailed, new_id
from adapters.http.errors import AGENT, LAUNCH, MESSAGE, as_rpc
from adapters.http.inbound import MessageIn
from adapters.runtime import Runtime
from engine.domain import usecases
from engine.domain.errors import NoChannel, SessionNotFound, TaskEnded, TaskMoved, TaskNotFound
from engine.domain.push import PushConfig
from engine.errors import EngineError, InvalidArgument
from projections import queries

RETRIES = 5

# The domain's refusals of where a message goes; ``accept`` answers them (``errors.RPC_ERRORS``,
# step ``MESSAGE``) and plans again on ``TaskMoved``.
WHERE_IT_GOES = (SessionNotFound, TaskNotFound, TaskEnded, TaskMoved)


def _context_of(runtime: Runtime, task_id: str | None) -> str | None:
    """A ``taskId`` without a ``contextId`` is in its task's context."""
    record = queries.task(runtime.engine.log.connection(), task_id) if task_id else None
    return record.session_id if record is not None else None


def accept(runtime: Runtime, message: MessageIn, text: str, push: PushConfig | None = None) -> str:
    """Record the message's work and start its run; a known messageId answers its task again.
    Returns the task id."""
    request = usecases.TaskMessage(
        session_id=message.context_id or _context_of(runtime, message.task_id) or new_id("a2a"),
        session_named=message.context_id is not None,
        task_named=message.task_id,
        message_id=message.message_id,
        text=text,
        agent=message.agent,
        new_task_id=new_id("task"),
        session_run_id=new_id("run"),
        interrupt=message.interrupt,
        push=push,
    )
    try:
        for _ in range(RETRIES - 1):
            with contextlib.suppress(TaskMoved):  # the task changed under the plan: plan again
                return _attempt(runtime, request)
        return _attempt(runtime, request)  # the last try: a TaskMoved now is the table's
    except WHERE_IT_GOES as ex:
        raise as_rpc(ex, MESSAGE) from None


def _attempt(runtime: Runtime, request: usecases.TaskMessage) -> str:
    """Deliver into the task's listening run, or plan the new run's stdin from the committed
    log and launch it; ``TaskMoved``: plan again."""
    engine = runtime.engine
    route = usecases.route(engine, request)
    if route.replay is not None:
        return str(route.replay.task_id)
    if route.task is not None and route.listening is not None and request.text:
        planned = replace(
            request, planned_task=route.task.task_id, planned_version=route.task.version
        )
        try:
            return _deliver(runtime, planned)
        except NoChannel:  # its run just stopped taking input: a new run, planned afresh
            route = usecases.route(engine, request)
            if route.replay is not None:
                return str(route.replay.task_id)
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
    return _launch(runtime, planned, messages)


def _deliver(runtime: Runtime, request: usecases.TaskMessage) -> str:
    try:
        return str(usecases.deliver(runtime.engine, request).task_id)
    except (*WHERE_IT_GOES, NoChannel):
        raise  # ``accept`` answers them; ``_attempt`` starts a run instead
    except EngineError as ex:  # the control's limits (an empty message), or the server's fault
        raise as_rpc(ex, LAUNCH) from None


def _launch(runtime: Runtime, request: usecases.TaskMessage, messages: tuple[str, ...]) -> str:
    try:
        runtime.engine.settings.agent(request.agent)
    except InvalidArgument as ex:  # an unknown agent: the message's params
        raise as_rpc(ex, AGENT) from None
    stdin = "\n".join(messages).encode()
    env = {"FOLDLINE_TASK_MESSAGES": str(len(messages))}
    try:
        started = runtime.jobs.launch(
            request.session_id,
            stdin,
            request.agent,
            lambda job_ids: replace(request, job_id=job_ids[0]),
            env=env,
        )
    except WHERE_IT_GOES:
        raise  # where the message goes: ``accept`` answers them
    except (EngineError, DispatchFailed) as ex:  # the run's refusal, or the server's fault
        raise as_rpc(ex, LAUNCH) from None
    return str(started.task_id)
