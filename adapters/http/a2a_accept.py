"""Where an A2A message goes (SPEC §5.2, ADR 0024): a new task, or the open task it names (or
its context owes), into which it is folded.

A folded message is recorded on the task (``task.message_added``), the task's live run is
superseded and a new run starts with all the task's messages in order on stdin, one per line,
and ``FOLDLINE_TASK_MESSAGES`` = their count; the task stays working and completes once, with
the last run's result. The run is spawned (with its stdin and environment) before the
transaction that records it, so the plan is read from the committed log first and checked
again inside the transaction against the task's version: a message that raced another one
into the same task plans again (optimistic concurrency, bounded).
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.config import LEASE_BUSY_TEXT
from adapters.dispatch import DispatchFailed, new_id
from adapters.http.a2a_wire import INTERNAL, INVALID_PARAMS, TASK_NOT_FOUND, UNSUPPORTED, RpcError
from adapters.http.inbound import MessageIn
from adapters.runtime import Runtime
from engine.domain import commands as c
from engine.domain import ids
from engine.domain.errors import LeaseBusy
from engine.domain.rows import DomainView
from engine.domain.task import TERMINAL
from engine.errors import EngineError, InvalidArgument, StorageError
from engine.log import Transaction
from projections import queries
from projections.view import SqlDomainView

RETRIES = 5


@dataclass(frozen=True)
class _Plan:
    task_id: str | None  # None: a new task
    version: int  # the task's version the run's stdin was built from
    messages: tuple[str, ...]  # every text the run gets, in order


class _Duplicate(Exception):
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id


class _Raced(Exception):
    """The task changed between the plan and the transaction."""


def _target(view: DomainView, message: MessageIn, session_id: str) -> str | None:
    """The open task the message goes to, or None for a new one. Raises the RpcErrors."""
    session = view.session(session_id)
    if message.context_id is not None and session is None:
        raise RpcError(INVALID_PARAMS, f"unknown contextId {message.context_id}")
    target = message.task_id
    if target is None and session is not None and session.owes is not None:
        target = session.owes.ref if session.owes.kind == "a2a" else None
    if target is None:
        return None
    task = view.task(target)
    if task is None or task.session_id != session_id:
        raise RpcError(TASK_NOT_FOUND, f"Task {target} not found in this context")
    if task.state in TERMINAL:
        raise RpcError(UNSUPPORTED, f"Task {target} is in terminal state")
    return target


def _plan(runtime: Runtime, message: MessageIn, session_id: str, text: str) -> _Plan:
    conn = runtime.engine.log.connection()
    target = _target(SqlDomainView(conn), message, session_id)
    if target is None:
        return _Plan(None, 0, (text,))
    record = queries.task(conn, target)
    if record is None:  # the view saw it: only a projection rebuild could get here
        raise _Raced
    return _Plan(target, record.version, (*(t for _, t in record.messages()), text))


def _context_of(runtime: Runtime, task_id: str | None) -> str | None:
    """A ``taskId`` without a ``contextId`` is in its task's context."""
    record = queries.task(runtime.engine.log.connection(), task_id) if task_id else None
    return record.session_id if record is not None else None


def accept(runtime: Runtime, message: MessageIn, text: str) -> str:
    """Record the message's work and start its run; a known messageId answers its task again.
    Returns the task id."""
    command_id = ids.a2a_command(message.message_id)
    session_id = message.context_id or _context_of(runtime, message.task_id) or new_id("a2a")
    for _ in range(RETRIES):
        known = queries.task_of_command(runtime.engine.log.connection(), command_id)
        if known is not None:
            return str(known)
        plan = _plan(runtime, message, session_id, text)
        try:
            return _launch(runtime, message, session_id, text, command_id, plan)
        except _Duplicate as duplicate:
            return duplicate.task_id
        except _Raced:
            continue
    raise RpcError(INTERNAL, "the task kept changing under this message; send it again")


def _launch(
    runtime: Runtime, message: MessageIn, session_id: str, text: str, command_id: str, plan: _Plan
) -> str:
    engine = runtime.engine
    chosen: dict[str, str] = {}
    agent = message.agent
    try:
        policy = engine.settings.agent(agent)
    except InvalidArgument as ex:
        raise RpcError(INVALID_PARAMS, ex.message) from None

    def record(tx: Transaction, job_ids: list[str]) -> None:
        job_id = job_ids[0]
        if tx.known_command(command_id) is not None:
            raise _Duplicate(str(queries.task_of_command(tx.cursor, command_id)))
        view = SqlDomainView(tx.cursor)
        target = _target(view, message, session_id)
        if target != plan.task_id:
            raise _Raced
        if target is None:
            if view.session(session_id) is None:
                engine.handle_in(
                    tx,
                    c.CreateSession(
                        session_id=session_id, origin="a2a", start_run_id=new_id("run")
                    ),
                )
            target = new_id("task")
            engine.handle_in(
                tx,
                c.CreateTask(
                    task_id=target,
                    session_id=session_id,
                    message_id=message.message_id,
                    text=text,
                ),
            )
        else:
            task = view.task(target)
            if task is None or task.version != plan.version:
                raise _Raced
            engine.handle_in(
                tx,
                c.AddTaskMessage(
                    task_id=target,
                    message_id=message.message_id,
                    text=text,
                    superseded_by=job_id,
                ),
            )
        engine.handle_in(
            tx,
            c.AcceptJob(
                job_id=job_id,
                session_id=session_id,
                prompt=text,
                agent=agent,
                resource_group=policy.resource_group,
                units=policy.units,
                task_id=target,
                owed=False,
                command_id=command_id,
            ),
        )
        chosen["task_id"] = target

    stdin = "\n".join(plan.messages).encode()
    env = {"FOLDLINE_TASK_MESSAGES": str(len(plan.messages))}
    try:
        runtime.jobs.launch(session_id, stdin, agent, record, env=env)
    except DispatchFailed as ex:
        raise RpcError(INTERNAL, f"Dispatch failed on the remote: {ex}") from None
    except LeaseBusy:
        raise RpcError(INTERNAL, LEASE_BUSY_TEXT) from None
    except StorageError:
        raise  # the server's fault, not the message's: JsonRpc answers it -32603 with its code
    except EngineError as ex:
        raise RpcError(UNSUPPORTED, ex.message) from None
    return chosen["task_id"]
