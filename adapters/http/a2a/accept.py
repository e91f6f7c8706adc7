"""Where an A2A message goes (design.md §5.2, ADR 0024): a new task, or the open task it names (or
its context owes), into which it is folded.

A folded message is recorded on the task (``task.message_added``). When the task's live run is
running and takes input (ADR 0038), the message is delivered into it, and nothing is spawned:
as the answer to the run's pending question, else as a message (``halo/interrupt: true`` in
its metadata interrupts the active turn first). Otherwise the task's live run is superseded
and a new run starts with all the task's messages in order on stdin, one per line, and
``FOLDLINE_TASK_MESSAGES`` = their count; the task stays working and completes once, with the
last run's result. The message's files (``adapters.http.a2a.message_files``) are saved once its task
is known, before the run is told of them: one line per file in the message's text, and for a new
run ``FOLDLINE_A2A_FILES`` naming their manifest. The run is spawned (with its stdin and
environment) before the transaction that records it, so the plan is read from the committed
log first and checked again inside the transaction against the task's version: a message that
raced another one into the same task plans again (optimistic concurrency, bounded). A run that
stopped taking input between the plan and the write (it just ended) gets the superseding run
instead.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from adapters.http.a2a import message_files
from adapters.http.a2a.message_files import LoadedFile
from adapters.http.errors import AGENT, INTERNAL, LAUNCH, MESSAGE, RpcError, as_rpc
from adapters.http.inbound import MessageIn
from adapters.services.dispatch import DispatchFailed, new_id
from adapters.services.runtime import Runtime
from engine.domain import usecases
from engine.domain.errors import NoChannel, SessionNotFound, TaskEnded, TaskMoved, TaskNotFound
from engine.domain.push import PushConfig
from engine.errors import EngineError, InvalidArgument

RETRIES = 5

# The domain's refusals of where a message goes; ``accept`` answers them (``errors.RPC_ERRORS``,
# step ``MESSAGE``) and plans again on ``TaskMoved``.
WHERE_IT_GOES = (SessionNotFound, TaskNotFound, TaskEnded, TaskMoved)


def _context_of(runtime: Runtime, task_id: str | None) -> str | None:
    """A ``taskId`` without a ``contextId`` is in its task's context."""
    record = runtime.reads.task(task_id) if task_id else None
    return record.session_id if record is not None else None


@dataclass
class _Files:
    """The message's files, saved at most once per task it is planned into."""

    runtime: Runtime
    loaded: Sequence[LoadedFile]
    saved: dict[str, message_files.Saved] = field(default_factory=dict)

    def told(self, request: usecases.TaskMessage, task_id: str) -> tuple[str, dict[str, str]]:
        """The message's text with a line per file, and the run's environment naming the
        manifest (both unchanged without files).

        Raises:
            RpcError: -32603, the files could not be saved (nothing is started).
        """
        if not self.loaded:
            return request.text, {}
        if task_id not in self.saved:
            self.saved[task_id] = self._save(request.message_id, task_id)
        saved = self.saved[task_id]
        return message_files.prompt(request.text, saved), {message_files.ENV: str(saved.manifest)}

    def _save(self, message_id: str, task_id: str) -> message_files.Saved:
        config, sandbox = self.runtime.config, self.runtime.jobs.sandbox
        workspace = config.workspace
        owner = None
        if sandbox is not None and os.geteuid() == 0:  # the workspace is the run user's
            owner = (sandbox.user.uid, sandbox.user.gid)
        try:
            if config.db_url is None and config.db.parent.is_relative_to(
                workspace / message_files.ROOT
            ):  # the log's private directory: never written into for a caller
                raise OSError(f"the log's directory {config.db.parent} is in {message_files.ROOT}")
            return message_files.save(workspace, task_id, message_id, self.loaded, owner)
        except OSError as ex:
            raise RpcError(INTERNAL, f"the message's files could not be saved: {ex}") from None


def accept(
    runtime: Runtime,
    message: MessageIn,
    text: str,
    files: Sequence[LoadedFile] = (),
    push: PushConfig | None = None,
) -> str:
    """Record the message's work and start its run; a known messageId answers its task again
    (and saves no files). Returns the task id."""
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
    saving = _Files(runtime, files)
    try:
        for _ in range(RETRIES - 1):
            with contextlib.suppress(TaskMoved):  # the task changed under the plan: plan again
                return _attempt(runtime, request, saving)
        return _attempt(runtime, request, saving)  # the last try: a TaskMoved now is the table's
    except WHERE_IT_GOES as ex:
        raise as_rpc(ex, MESSAGE) from None


def _attempt(runtime: Runtime, request: usecases.TaskMessage, files: _Files) -> str:
    """Deliver into the task's listening run, or plan the new run's stdin from the committed
    log and launch it; ``TaskMoved``: plan again. A repeat returns before any file is saved."""
    engine = runtime.engine
    route = usecases.route(engine, request)
    if route.replay is not None:
        return str(route.replay.task_id)
    if route.task is not None and route.listening is not None and (request.text or files.loaded):
        text, _ = files.told(request, route.task.task_id)  # a live run: its text says it all
        planned = replace(
            request,
            text=text,
            planned_task=route.task.task_id,
            planned_version=route.task.version,
        )
        try:
            return _deliver(runtime, planned)
        except NoChannel:  # its run just stopped taking input: a new run, planned afresh
            route = usecases.route(engine, request)
            if route.replay is not None:
                return str(route.replay.task_id)
    task_id = route.task.task_id if route.task is not None else request.new_task_id
    text, env = files.told(request, task_id)
    request = replace(request, text=text)
    messages: tuple[str, ...] = (request.text,)
    version = 0
    if route.task is not None:
        record = runtime.reads.task(route.task.task_id)
        if record is None:  # the view saw it: only a projection rebuild could get here
            raise TaskMoved(f"task {route.task.task_id} is gone", task_id=route.task.task_id)
        messages = (*(t for _, t in record.messages()), request.text)
        version = record.version
    planned = replace(
        request,
        planned_task=route.task.task_id if route.task else None,
        planned_version=version,
    )
    return _launch(runtime, planned, messages, env)


def _deliver(runtime: Runtime, request: usecases.TaskMessage) -> str:
    try:
        return str(usecases.deliver(runtime.engine, request).task_id)
    except (*WHERE_IT_GOES, NoChannel):
        raise  # ``accept`` answers them; ``_attempt`` starts a run instead
    except EngineError as ex:  # the control's limits (an empty message), or the server's fault
        raise as_rpc(ex, LAUNCH) from None


def _launch(
    runtime: Runtime,
    request: usecases.TaskMessage,
    messages: tuple[str, ...],
    files_env: dict[str, str],
) -> str:
    try:
        runtime.engine.settings.agent(request.agent)
    except InvalidArgument as ex:  # an unknown agent: the message's params
        raise as_rpc(ex, AGENT) from None
    stdin = "\n".join(messages).encode()
    env = {**files_env, "FOLDLINE_TASK_MESSAGES": str(len(messages))}
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
