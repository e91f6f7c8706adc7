"""Session rules (design.md §4.3): create, start, detach and attach, pause, suspend and resume,
finish, stop, cancel, taint, and the relay a session may owe. A session that becomes terminal
takes its live work with it in the same transaction."""

from __future__ import annotations

from engine.domain import commands as c
from engine.domain import ids
from engine.domain import job as job_
from engine.domain import session as session_
from engine.domain import task as task_
from engine.domain.errors import AlreadyExists, Conflict, SessionMoved
from engine.domain.job import JobState as J
from engine.domain.rows import SessionRow
from engine.domain.rules import admission, pointer
from engine.domain.rules.lookups import session_for
from engine.domain.rules.registry import Context, rule
from engine.domain.session import Owed
from engine.domain.session import SessionState as S
from engine.errors import InvalidTransition
from engine.events import Event


def end_work(ctx: Context, session_id: str, reason: str) -> None:
    """Before a session becomes terminal, in the same transaction: cancel every live job and
    open task of it, and clear whatever it still owes (no orphaned live work, no pointer left
    on a session that can never settle it)."""
    for job in ctx.view.live_jobs(session_id):
        events: list[Event] = []
        if job.state == J.RUNNING:
            events.append(job_.JobCancelRequested(reason=reason))
        events.append(job_.JobCancelled(reason=reason, confirms=job.state == J.RUNNING))
        ctx.append(ids.job(job.job_id), *events)
    for task in ctx.view.open_tasks(session_id):
        ctx.append(ids.task(task.task_id), task_.TaskCanceled(text=f"Session {reason}."))
    row = ctx.view.session(session_id)
    if row is not None and row.owes is not None:
        ctx.append(ids.session(session_id), session_.SessionSettled(owed=row.owes))


def agent_name(agent: str) -> str:
    """How a message names an agent: ``agent a``, or the default one (``""``)."""
    return f"agent {agent}" if agent else "the default agent"


def check_root_agent(session: SessionRow, agent: str) -> None:
    """A session keeps the agent it was created with (ADR 0048): each of its root jobs (an
    ``/invocations`` job, an A2A task's) runs that agent. The caller planned the run's agent
    from the committed log; this is the check in the write, so two first calls racing on one
    session id cannot both fix an agent.

    Raises:
        SessionMoved: the session runs another agent than the job was planned with.
    """
    if agent != session.agent:
        raise SessionMoved(
            f"session {session.session_id} runs {agent_name(session.agent)}, not"
            f" {agent_name(agent)}",
            session_id=session.session_id,
            agent=session.agent,
        )


@rule(c.CreateSession)
def create_session(cmd: c.CreateSession, ctx: Context) -> None:
    if ctx.view.session(cmd.session_id) is not None:
        raise AlreadyExists(f"session {cmd.session_id!r} exists", session_id=cmd.session_id)
    admission.admit(ctx, cmd.resource_group, cmd.units)
    events: list[Event] = [
        session_.SessionCreated(
            agent=cmd.agent,
            origin=cmd.origin,
            resource_group=cmd.resource_group,
            units=cmd.units,
            has_controller=cmd.has_controller,
        )
    ]
    if cmd.start_run_id is not None:
        events.append(session_.SessionStarted(run_id=cmd.start_run_id))
    ctx.append(ids.session(cmd.session_id), *events)


@rule(c.StartSession)
def start_session(cmd: c.StartSession, ctx: Context) -> None:
    session_for(cmd, ctx)
    ctx.append(
        ids.session(cmd.session_id),
        session_.SessionStarted(run_id=cmd.run_id, pid=cmd.pid, start_token=cmd.start_token),
    )


@rule(c.DetachSession)
def detach_session(cmd: c.DetachSession, ctx: Context) -> None:
    session_for(cmd, ctx)
    ctx.append(ids.session(cmd.session_id), session_.SessionDetached(by=cmd.by))


def readmit(ctx: Context, row: SessionRow) -> None:
    if row.state in (S.PAUSED, S.SUSPENDED):  # these released their capacity
        admission.admit(ctx, row.resource_group, row.units)


@rule(c.AttachSession)
def attach_session(cmd: c.AttachSession, ctx: Context) -> None:
    row = session_for(cmd, ctx)
    readmit(ctx, row)
    ctx.append(ids.session(cmd.session_id), session_.SessionAttached())


@rule(c.PauseSession)
def pause_session(cmd: c.PauseSession, ctx: Context) -> None:
    session_for(cmd, ctx)
    ctx.append(ids.session(cmd.session_id), session_.SessionPaused())
    for job in ctx.view.live_jobs(cmd.session_id):  # a cold pause pauses its running jobs
        if job.state == J.RUNNING:
            ctx.append(ids.job(job.job_id), job_.JobPaused(by="session"))


@rule(c.SuspendSession)
def suspend_session(cmd: c.SuspendSession, ctx: Context) -> None:
    session_for(cmd, ctx)
    ctx.append(ids.session(cmd.session_id), session_.SessionSuspended(reason=cmd.reason))


@rule(c.ResumeSession)
def resume_session(cmd: c.ResumeSession, ctx: Context) -> None:
    row = session_for(cmd, ctx)
    if row.tainted and not cmd.allow_tainted and row.state not in session_.TERMINAL:
        raise Conflict(
            f"session {row.session_id} is tainted; resume it with allow_tainted",
            session_id=row.session_id,
        )
    readmit(ctx, row)
    ctx.append(ids.session(cmd.session_id), session_.SessionResumed(run_id=cmd.run_id or ""))


@rule(c.FinishSession)
def finish_session(cmd: c.FinishSession, ctx: Context) -> None:
    row = session_for(cmd, ctx)
    stream_id = ids.session(row.session_id)
    if row.state == S.DETACHED and row.detached_by == "operator":
        raise InvalidTransition(
            stream_id, row.state, "session.finishing", "an operator detach wins over a late finish"
        )
    if row.state != S.FINISHING:
        ctx.append(stream_id, session_.SessionFinishing(requested=cmd.requested, error=cmd.error))
    requested = cmd.requested if row.state != S.FINISHING else (row.requested or cmd.requested)
    recoverable = [j for j in ctx.view.live_jobs(row.session_id) if j.state != J.CANCELLING]
    if recoverable:  # work remains that can be resumed: the session is detached, not ended
        ctx.append(stream_id, session_.SessionFinished(outcome="detached"))
        return
    end_work(ctx, row.session_id, f"session {requested}")
    ctx.append(stream_id, session_.SessionFinished(outcome=requested))


def close(
    ctx: Context,
    row: SessionRow,
    closing: Event,
    closed: Event,
    in_progress: str,
    wait: bool,
    reason: str,
) -> None:
    """Stop or cancel: mark it in progress, and unless the caller waits, end the work and the
    session now."""
    stream_id = ids.session(row.session_id)
    if row.state != in_progress:
        ctx.append(stream_id, closing)
        if wait:
            return
    end_work(ctx, row.session_id, reason)
    ctx.append(stream_id, closed)


@rule(c.StopSession)
def stop_session(cmd: c.StopSession, ctx: Context) -> None:
    row = session_for(cmd, ctx)
    close(
        ctx,
        row,
        session_.SessionStopping(reason=cmd.reason),
        session_.SessionStopped(),
        S.STOPPING,
        cmd.wait,
        cmd.reason or "session stopped",
    )


@rule(c.CancelSession)
def cancel_session(cmd: c.CancelSession, ctx: Context) -> None:
    row = session_for(cmd, ctx)
    close(
        ctx,
        row,
        session_.SessionCancelling(reason=cmd.reason),
        session_.SessionCancelled(),
        S.CANCELLING,
        cmd.wait,
        cmd.reason or "session cancelled",
    )


@rule(c.TaintSession)
def taint_session(cmd: c.TaintSession, ctx: Context) -> None:
    session_for(cmd, ctx)
    ctx.append(ids.session(cmd.session_id), session_.SessionTainted(reason=cmd.reason))


@rule(c.OweRelay)
def owe_relay(cmd: c.OweRelay, ctx: Context) -> None:
    row = session_for(cmd, ctx)
    pointer.take(ctx, row, Owed("relay", cmd.to_session))


@rule(c.SettleRelay)
def settle_relay(cmd: c.SettleRelay, ctx: Context) -> None:
    row = session_for(cmd, ctx)
    if row.owes is None or row.owes.kind != "relay":
        raise Conflict(f"session {row.session_id} owes no relay report", session_id=row.session_id)
    ctx.append(ids.session(row.session_id), session_.SessionSettled(owed=row.owes))
