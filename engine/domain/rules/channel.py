"""A run's live channel (ADR 0038): a control is decided and recorded before anything reaches the
run, with the source system's limits and guards; its delivery and what the run says back are
recorded as they happen. An A2A follow-up on a task whose run takes input is delivered into
that run (an answer, when the run asked a question), and a run's question puts its task in
``input-required``."""

from __future__ import annotations

import json

from engine.domain import channel as ch
from engine.domain import commands as c
from engine.domain import ids
from engine.domain import job as job_
from engine.domain import task as task_
from engine.domain.errors import Conflict, NoChannel, StaleTurn, UnknownRequest
from engine.domain.job import JobState as J
from engine.domain.rows import DomainView, JobRow, TaskRow
from engine.domain.rules import answers, lookups
from engine.domain.rules.registry import Context, rule
from engine.domain.rules.roles import controller
from engine.domain.task import TaskState as T
from engine.errors import InvalidArgument


def takes_input(job: JobRow) -> bool:
    """A running job whose current run reads controls on its stdin."""
    return job.state == J.RUNNING and job.input == ch.INPUT_LINES


def _text(action: str, text: str) -> str:
    if action == "finalize" and not text:
        return ch.FINALIZE_TEXT
    limit = ch.STEER_LIMIT if action in ("steer", "finalize") else ch.MESSAGE_LIMIT
    if action in ("message", "steer", "finalize") and not 1 <= len(text) <= limit:
        raise InvalidArgument(f"{action} text must be 1 to {limit} characters")
    if action not in ("message", "steer", "finalize") and text:
        raise InvalidArgument(f"{action} takes no text")
    return text


def _response(ctx: Context, job: JobRow, request: str, response: str) -> str:
    """A response: a JSON object of at most 64 KiB, to a request the run asked and nobody
    answered yet."""
    if len(response) > ch.RESPONSE_LIMIT:
        raise InvalidArgument(f"a response is at most {ch.RESPONSE_LIMIT} characters of JSON")
    if ch.nesting(response) > ch.RESPONSE_DEPTH:
        raise InvalidArgument(f"a response nests at most {ch.RESPONSE_DEPTH} levels deep")
    try:
        value = json.loads(response) if response else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise InvalidArgument("response must be a JSON object")
    if request not in dict(ctx.view.pending_requests(job.job_id)):
        raise UnknownRequest(
            f"job {job.job_id} has no pending request {request!r}",
            job_id=job.job_id,
            request=request,
        )
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def control(ctx: Context, job: JobRow, cmd: ch.SendControl, by: str) -> job_.JobControlSent:
    """The event that records ``cmd`` for ``job``, every limit and guard checked.

    Raises:
        NoChannel: the job is not running, or its run takes no input.
        StaleTurn: a steer or interrupt for a turn that is not the active one.
        UnknownRequest: a response to no pending request.
        InvalidArgument: a text, response or effort outside its limits.
    """
    if not takes_input(job):
        why = f"is {job.state}" if job.state != J.RUNNING else "runs without input"
        raise NoChannel(f"job {job.job_id} {why}: it takes no control", job_id=job.job_id)
    action = cmd.action
    if action in ch.NEEDS_TURN and (job.turn is None or cmd.turn != job.turn):
        active = f"turn {job.turn!r} is active" if job.turn else "no turn is active"
        raise StaleTurn(
            f"{action} for turn {cmd.turn!r} of job {job.job_id}, but {active}",
            job_id=job.job_id,
            turn=cmd.turn,
            active=job.turn,
        )
    if action == "effort" and cmd.effort not in ch.EFFORTS:
        raise InvalidArgument(f"effort must be one of {', '.join(ch.EFFORTS)}")
    response = ""
    if action == "respond":
        response = _response(ctx, job, cmd.request, cmd.response)
    return job_.JobControlSent(
        action=action,
        text=_text(action, cmd.text),
        turn=cmd.turn if action in ch.NEEDS_TURN else "",
        request=cmd.request if action == "respond" else "",
        response=response,
        effort=cmd.effort if action == "effort" else "",
        by=by,
    )


@rule(ch.SendControl)
def send_control(cmd: ch.SendControl, ctx: Context) -> None:
    job = lookups.job_for(cmd, ctx)
    # The server's own senders (an A2A follow-up, an invocation's answer) name themselves in
    # ``by`` and need no grant; a caller needs the action's (ADR 0057).
    by = cmd.by or controller(ctx, cmd.caller_job, cmd.caller_token_digest, job, cmd.action)
    lookups.expect_revision(cmd.expected_revision, job)
    ctx.append(ids.job(job.job_id), control(ctx, job, cmd, by))
    if cmd.action == "respond":
        _working_again(ctx, job)


def _working_again(ctx: Context, job: JobRow) -> None:
    """The last pending question of a job's run is answered: its task works again."""
    task = ctx.view.task(job.task_id) if job.task_id else None
    waiting = task is not None and task.state == T.INPUT_REQUIRED
    if task is not None and waiting and not ctx.view.pending_requests(job.job_id):
        ctx.append(ids.task(task.task_id), task_.TaskStatusUpdated(text=""))


def _pending(ctx: Context, job_id: str, control_id: int) -> JobRow:
    job = lookups.job(ctx, job_id)
    state = ctx.view.control_state(job.job_id, control_id)
    if state != "pending":
        raise Conflict(
            f"control {control_id} of job {job_id} is {state or 'unknown'}, not pending",
            job_id=job_id,
            control=control_id,
        )
    return job


@rule(ch.RecordControlDelivered)
def record_control_delivered(cmd: ch.RecordControlDelivered, ctx: Context) -> None:
    job = _pending(ctx, cmd.job_id, cmd.control)
    if cmd.run_id != job.run_id:
        raise Conflict(
            f"run {cmd.run_id} of job {job.job_id} is not its current run {job.run_id}",
            job_id=job.job_id,
        )
    ctx.append(
        ids.job(job.job_id), job_.JobControlDelivered(control=cmd.control, run_id=cmd.run_id)
    )


@rule(ch.RecordControlLost)
def record_control_lost(cmd: ch.RecordControlLost, ctx: Context) -> None:
    job = _pending(ctx, cmd.job_id, cmd.control)
    ctx.append(ids.job(job.job_id), job_.JobControlLost(control=cmd.control, reason=cmd.reason))


@rule(ch.RecordRunSignal)
def record_run_signal(cmd: ch.RecordRunSignal, ctx: Context) -> None:
    job = lookups.job(ctx, cmd.job_id)
    if cmd.run_id != job.run_id:
        raise Conflict(f"run {cmd.run_id} of job {job.job_id} is not its current run")
    stream = ids.job(job.job_id)
    if cmd.signal == "turn_started" and cmd.turn:
        ctx.append(stream, job_.JobTurnStarted(turn=cmd.turn))
    elif cmd.signal == "turn_ended" and cmd.turn:
        if cmd.turn != job.turn:
            raise StaleTurn(f"turn {cmd.turn!r} of job {job.job_id} is not the active one")
        ctx.append(stream, job_.JobTurnEnded(turn=cmd.turn))
    elif cmd.signal == "input_required" and cmd.request:
        ctx.append(stream, job_.JobInputRequested(request=cmd.request, question=cmd.question))
        task = ctx.view.task(job.task_id) if job.task_id else None
        if task is not None and task.state in (T.SUBMITTED, T.WORKING):
            ctx.append(ids.task(task.task_id), task_.TaskInputRequired(text=cmd.question))
    elif cmd.signal == "progress" and cmd.text:
        ctx.append(stream, job_.JobProgress(text=cmd.text))
    elif cmd.signal in ch.ANSWERS:
        answers.record(ctx, job, cmd)
    else:
        raise InvalidArgument(f"{cmd.signal} lacks its turn, request or text")


def listening(view: DomainView, task: TaskRow) -> JobRow | None:
    """The task's live job, if it is running and its run takes input: a follow-up goes into
    it (``engine.domain.usecases`` plans with this too)."""
    for job in view.live_jobs(task.session_id):
        if job.task_id == task.task_id:
            return job if takes_input(job) else None
    return None


def owed_question(view: DomainView, session_id: str) -> tuple[JobRow, str] | None:
    """The job ``session_id`` owes and the request id of its run's oldest unanswered question,
    if that job is running, takes input and asked one: an invocation's prompt on the session
    answers it (``engine.domain.prompt_delivery.answer_prompt``)."""
    session = view.session(session_id)
    owes = session.owes if session is not None else None
    job = view.job(owes.ref) if owes is not None and owes.kind == "job" else None
    if job is None or not takes_input(job):
        return None
    pending = view.pending_requests(job.job_id)
    return (job, pending[0][0]) if pending else None


@rule(c.DeliverTaskMessage)
def deliver_task_message(cmd: c.DeliverTaskMessage, ctx: Context) -> None:
    """A follow-up into the task's running agent: recorded on the task (which works again, or
    waits on the run's next question when it answers one of several), then an interrupt of
    the active turn if asked, then, last, the text as the answer to the run's oldest pending
    question, or else as a message."""
    task = lookups.task_for(cmd, ctx)
    job = listening(ctx.view, task)
    if job is None:
        raise NoChannel(f"task {task.task_id}'s run takes no input now", task_id=task.task_id)
    pending = ctx.view.pending_requests(job.job_id)
    message = task_.TaskMessageAdded(message_id=cmd.message_id, text=cmd.text)
    ctx.append(ids.task(task.task_id), message)
    if len(pending) > 1:
        ctx.append(ids.task(task.task_id), task_.TaskInputRequired(text=pending[1][1]))
    by, stream = f"a2a:{task.task_id}", ids.job(job.job_id)
    if cmd.interrupt and job.turn is not None:
        ask = ch.SendControl(job_id=job.job_id, action="interrupt", turn=job.turn)
        ctx.append(stream, control(ctx, job, ask, by))
    if pending:
        answer = json.dumps({"text": cmd.text}, ensure_ascii=False)
        ask = ch.SendControl(
            job_id=job.job_id, action="respond", request=pending[0][0], response=answer
        )
    else:
        ask = ch.SendControl(job_id=job.job_id, action="message", text=cmd.text)
    ctx.append(stream, control(ctx, job, ask, by))
