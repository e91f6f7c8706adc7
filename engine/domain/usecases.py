"""Starting work for a caller (design.md §7, §5.2; ADR 0033): what a request becomes when it takes
more than one command, decided in one write together with the starts of its runs.

Two requests start work: an invocation (its session if missing, then the job) and an A2A
message (a new task, or the open task it names or its session owes, into which it is folded).
The caller spawns the runs gated before the write, so their ids and tokens are known, and
hands ``start`` the request and the runs' ``StartJob`` commands; ``start`` decides the request
and starts the runs in one transaction, or starts nothing.

A request's idempotency key is looked up here and nowhere else: inside the write (the
authority) and, for a message, in ``route`` before its runs are spawned, so that a repeat
never spawns anything. A repeat appends nothing and answers what the first one made.

A message's run gets every text of its task on stdin, so the task is planned from the
committed log before the write (``route``) and checked again inside it: a task that moved in
between is a ``TaskMoved``, and the caller plans again.

Work that is already running and takes input (ADR 0038) gets a request without a new run: a
follow-up on a task whose live run reads controls is delivered into it (``deliver``); an
invocation's prompt into the job its session owes is ``engine.domain.prompt_delivery``'s. The
request's idempotency key is then the command id of what it recorded (the control), so a
repeat answers the job it went into (``_made_by``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from engine.domain import commands as c
from engine.domain import controls, ids
from engine.domain.engine import DomainEngine
from engine.domain.errors import NoChannel, SessionNotFound, TaskEnded, TaskMoved, TaskNotFound
from engine.domain.push import PushConfig, SetPushConfig
from engine.domain.rows import DomainView, JobRow, TaskRow
from engine.domain.rules.channel import listening
from engine.domain.task import TERMINAL
from engine.log import Transaction


@dataclass(frozen=True)
class Invocation:
    """An ``/invocations`` request: the session if missing, then the job."""

    session_id: str
    agent: str
    prompt: str
    prompt_file: str
    command_id: str | None  # the caller's idempotency key, as a command id
    session_run_id: str  # the run of the session, if this request creates it
    job_id: str = ""  # filled in by the caller once the run is spawned
    agent_ignored: str = ""  # as planned (ADR 0048): the agent the caller named in vain, and
    covers: tuple[str, ...] | None = None  # the jobs whose prompts it answers (None: no fold)


@dataclass(frozen=True)
class TaskMessage:
    """An A2A message: a new task, or a follow-up folded into an open one."""

    session_id: str
    session_named: bool  # the caller named the session: it must exist
    task_named: str | None  # the task the caller named, if any
    message_id: str
    text: str
    agent: str
    new_task_id: str  # the task's id, if the message opens one
    session_run_id: str  # the run of the session, if the message creates it
    planned_task: str | None = None  # what the run's stdin was built from (``route``)
    planned_version: int = 0
    job_id: str = ""  # filled in by the caller once the run is spawned
    interrupt: bool = False  # ``halo/interrupt``: a delivered follow-up interrupts the turn
    push: PushConfig | None = None  # a webhook for the task, set in the same write (ADR 0039)
    agent_ignored: str = ""  # the agent the message named, overridden by its session's

    @property
    def command_id(self) -> str:
        return ids.a2a_command(self.message_id)


Request = Invocation | TaskMessage | c.AcceptJobs | controls.ControlJob | controls.ForkJob | None
"""What ``start`` decides before the starts: a request, a batch of jobs, a fork, a continue
that relaunches a job, or nothing (the runs resume jobs accepted earlier)."""


@dataclass(frozen=True)
class Started:
    """The outcome of ``start``, or of ``route`` for a message recorded before."""

    job_id: str | None = None  # the invocation's job (the first one's, on a repeat)
    task_id: str | None = None  # the message's task
    duplicate: bool = False  # a repeat: nothing was appended, no run was started
    position: int = 0  # the commit's; 0 on a repeat
    control: int = 0  # a delivery's control (its log position); 0 for a new job or a repeat


@dataclass(frozen=True)
class Route:
    """Where a message goes, as the committed log says (``route``)."""

    replay: Started | None  # the message was recorded before: what it made
    task: TaskRow | None  # the open task it folds into; None: a new task
    listening: JobRow | None = None  # the task's live run, if it takes input: deliver into it


def start(engine: DomainEngine, request: Request, starts: Sequence[c.StartJob]) -> Started:
    """Decide ``request`` and start the runs in one write. A repeat starts nothing. Each
    start carries the tenure this process appends under as the write runs (its ``epoch`` is
    set here, not by the caller, so a tenure taken over meanwhile fences it).

    Raises:
        EngineError: the rules refused the request or a start (nothing recorded); for a
            message also ``SessionNotFound``, ``TaskNotFound``, ``TaskEnded``, ``TaskMoved``.
    """

    def work(tx: Transaction) -> Started:
        started = _decide(engine, tx, request)
        if started.duplicate:
            return started
        for command in starts:
            engine.handle_in(tx, msgspec.structs.replace(command, epoch=engine.log.epoch))
        return Started(started.job_id, started.task_id, position=tx.position)

    return engine.log.write(work)


def route(engine: DomainEngine, message: TaskMessage) -> Route:
    """Plan ``message`` from the committed log: what it made if it was recorded before, else
    the open task it goes to (``start`` checks this again inside its write).

    Raises:
        SessionNotFound, TaskNotFound, TaskEnded: see ``_target``.
    """
    replay = recorded(engine, message.command_id)
    if replay is not None:
        return Route(replay, None)
    view = engine.view_of(engine.log.connection())
    task = _target(view, message)
    return Route(None, task, listening(view, task) if task is not None else None)


def deliver(engine: DomainEngine, message: TaskMessage) -> Started:
    """Deliver a follow-up into its task's running agent in one write, planned by ``route``
    (``planned_task``, ``planned_version``): recorded on the task, then sent as the answer to
    the run's pending question or as a message. A repeat appends nothing.

    Raises:
        NoChannel: the task's run takes no input now (it just ended): nothing recorded, the
            caller plans again and starts a run as before.
        TaskMoved: the task moved since the plan; and see ``_target``.
    """

    def work(tx: Transaction) -> Started:
        view = engine.view_of(tx.cursor)
        replay = repeat_of(tx, view, message.command_id)
        if replay is not None:
            return replay
        task = _planned(view, message)
        if task is None:  # planned for an open task: only a bug could get here
            raise TaskMoved("the message has no task to go into", session_id=message.session_id)
        job = listening(view, task)
        if job is None:
            raise NoChannel(f"task {task.task_id}'s run takes no input now", task_id=task.task_id)
        _set_push(engine, tx, task.task_id, message)
        done = engine.handle_in(
            tx,
            c.DeliverTaskMessage(
                task_id=task.task_id,
                message_id=message.message_id,
                text=message.text,
                interrupt=message.interrupt,
                command_id=message.command_id,
            ),
        )
        # The rule's last event is the control that carries the text (or the answer).
        return Started(job.job_id, task.task_id, position=tx.position, control=done.last_position)

    return engine.log.write(work)


def recorded(engine: DomainEngine, command_id: str) -> Started | None:
    """What a request recorded before under ``command_id`` made, from the committed log, or
    None: the answer to a repeat without spawning anything (``start`` decides again inside
    its write, by the same rule, should the first one commit meanwhile)."""
    return _made_by(engine.view_of(engine.log.connection()), command_id)


def _decide(engine: DomainEngine, tx: Transaction, request: Request) -> Started:
    if isinstance(request, Invocation):
        return _invoke(engine, tx, request)
    if isinstance(request, TaskMessage):
        return _fold(engine, tx, request)
    if request is not None:
        engine.handle_in(tx, request)
    return Started()


def _made_by(view: DomainView, command_id: str) -> Started | None:
    """What a command recorded before made: its job (and the job's task), or the job it sent
    a control into (a delivery), as a repeat."""
    job = view.job_of_command(command_id) or view.job_controlled_by(command_id)
    if job is None:  # a retired job's key still names it (ADR 0062)
        retired = view.retired_job_of_command(command_id)
        return None if retired is None else Started(retired, None, duplicate=True)
    return Started(job.job_id, job.task_id, duplicate=True)


def repeat_of(tx: Transaction, view: DomainView, command_id: str | None) -> Started | None:
    """Inside the write, the authority: a command id the log knows is a repeat (what it
    made), else None."""
    if command_id is None or tx.known_command(command_id) is None:
        return None
    replay = _made_by(view, command_id)
    if replay is None:  # the command's job is in the same commit: only a bug could get here
        raise LookupError(f"command {command_id} recorded no job and sent no control")
    return replay


def _invoke(engine: DomainEngine, tx: Transaction, request: Invocation) -> Started:
    view = engine.view_of(tx.cursor)
    command_id = request.command_id
    replay = repeat_of(tx, view, command_id)
    if replay is not None:
        return replay
    policy = engine.settings.agent(request.agent)
    if view.session(request.session_id) is None:
        engine.handle_in(
            tx,
            c.CreateSession(
                session_id=request.session_id,
                agent=request.agent,
                origin="invocations",
                start_run_id=request.session_run_id,
            ),
        )
    engine.handle_in(
        tx,
        c.AcceptJob(
            job_id=request.job_id,
            session_id=request.session_id,
            prompt=request.prompt,
            prompt_file=request.prompt_file,
            agent=request.agent,
            resource_group=policy.resource_group,
            units=policy.units,
            command_id=command_id,
            root=True,
            agent_ignored=request.agent_ignored,
            covers=request.covers,
        ),
    )
    return Started(request.job_id)


def _target(view: DomainView, message: TaskMessage) -> TaskRow | None:
    """The open task ``message`` goes to, or None for a new one.

    Raises:
        SessionNotFound: the message names a session that does not exist.
        TaskNotFound: the task it names (or its session owes) is not one of its session.
        TaskEnded: that task is in a terminal state.
    """
    session_id = message.session_id
    session = view.session(session_id)
    if message.session_named and session is None:
        raise SessionNotFound(f"no session {session_id}", session_id=session_id)
    target = message.task_named
    if target is None and session is not None and session.owes is not None:
        target = session.owes.ref if session.owes.kind == "a2a" else None
    if target is None:
        return None
    task = view.task(target)
    if task is None or task.session_id != session_id:
        raise TaskNotFound(
            f"no task {target} in session {session_id}", task_id=target, session_id=session_id
        )
    if task.state in TERMINAL:
        raise TaskEnded(f"task {target} is {task.state}", task_id=target, state=task.state)
    return task


def _planned(view: DomainView, message: TaskMessage) -> TaskRow | None:
    """The task ``message`` goes to inside the write, as it was planned (None: a new task).

    Raises:
        TaskMoved: it goes to another task, or its task moved since the plan; and see
            ``_target``.
    """
    target = _target(view, message)
    if (target.task_id if target else None) != message.planned_task:
        raise TaskMoved(
            "the message goes to another task than planned", session_id=message.session_id
        )
    if target is not None and target.version != message.planned_version:
        raise TaskMoved(
            f"task {target.task_id} moved since the message was planned",
            task_id=target.task_id,
            planned=message.planned_version,
            version=target.version,
        )
    return target


def _fold(engine: DomainEngine, tx: Transaction, message: TaskMessage) -> Started:
    view = engine.view_of(tx.cursor)
    command_id = message.command_id
    replay = repeat_of(tx, view, command_id)
    if replay is not None:
        return replay
    policy = engine.settings.agent(message.agent)
    session_id = message.session_id
    target = _planned(view, message)
    if target is None:
        if view.session(session_id) is None:
            engine.handle_in(
                tx,
                c.CreateSession(
                    session_id=session_id,
                    agent=message.agent,
                    origin="a2a",
                    start_run_id=message.session_run_id,
                ),
            )
        task_id = message.new_task_id
        engine.handle_in(
            tx,
            c.CreateTask(
                task_id=task_id,
                session_id=session_id,
                message_id=message.message_id,
                text=message.text,
            ),
        )
    else:
        task_id = target.task_id
        engine.handle_in(
            tx,
            c.AddTaskMessage(
                task_id=task_id,
                message_id=message.message_id,
                text=message.text,
                superseded_by=message.job_id,
            ),
        )
    _set_push(engine, tx, task_id, message)
    engine.handle_in(
        tx,
        c.AcceptJob(
            job_id=message.job_id,
            session_id=session_id,
            prompt=message.text,
            agent=message.agent,
            resource_group=policy.resource_group,
            units=policy.units,
            task_id=task_id,
            owed=False,
            command_id=command_id,
            root=True,
            agent_ignored=message.agent_ignored,
        ),
    )
    return Started(message.job_id, task_id)


def _set_push(engine: DomainEngine, tx: Transaction, task_id: str, message: TaskMessage) -> None:
    """The message's webhook, set before its run can move the task: it hears every step."""
    if message.push is not None:
        config = msgspec.structs.asdict(message.push)
        engine.handle_in(tx, SetPushConfig(task_id=task_id, **config))


__all__ = [
    "Invocation",
    "Request",
    "Route",
    "Started",
    "TaskMessage",
    "deliver",
    "repeat_of",
    "route",
    "start",
]
