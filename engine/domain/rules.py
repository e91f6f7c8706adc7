"""The domain rules: how each command becomes events (SPEC §4.2-§4.7).

Every rule reads the current rows through a ``DomainView`` and appends through ``emit``, both
bound to one write transaction: a later read in the same command sees the earlier appends
(that is how a batch is admitted cumulatively), and any error rolls the whole command back.
Rules never do IO of their own and never read the clock except through ``Context.now``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.clock import parse_time
from engine.domain import commands as c
from engine.domain import job as job_
from engine.domain import lease as lease_
from engine.domain import session as session_
from engine.domain import task as task_
from engine.domain.errors import (
    AdmissionRejected,
    AlreadyExists,
    Conflict,
    LeaseBusy,
    NotFound,
    NotLeaseHolder,
)
from engine.domain.rows import DomainView, JobRow, SessionRow, TaskRow
from engine.domain.session import Owed
from engine.engine import Context as EngineContext
from engine.errors import ConcurrencyError, InvalidArgument, InvalidTransition
from engine.events import Event

J, S, T = job_.JobState, session_.SessionState, task_.TaskState
# A session accepts new jobs and tasks only while it is doing work for callers.
ADMITTING = frozenset({S.STARTING, S.RUNNING, S.DETACHED})
# A job may spawn children only while it is itself live and not on its way out.
SPAWNING = frozenset({J.QUEUED, J.RUNNING})
SUPERSEDABLE = frozenset({J.QUEUED, J.RUNNING, J.PAUSED, J.SUSPENDED})


@dataclass(frozen=True)
class Settings:
    """Configuration the rules need (SPEC §4.7, §11)."""

    resource_groups: Mapping[str, int] = field(default_factory=dict)
    lease_stale_s: float = 45.0
    max_depth: int = 8


Context = EngineContext[DomainView, Settings]
"""What every rule gets: the view, appends, the time and the settings of one command."""


def decide(command: c.Command, ctx: Context) -> None:
    """Apply the rules of ``command``; raises an ``EngineError`` to refuse it."""
    handler = _HANDLERS.get(type(command))
    if handler is None:
        raise InvalidArgument(f"unknown command {type(command).__name__}")
    handler(command, ctx)


# -- lookups and shared checks -----------------------------------------------------------


def _session(ctx: Context, session_id: str) -> SessionRow:
    row = ctx.view.session(session_id)
    if row is None:
        raise NotFound(f"session {session_id!r} does not exist", session_id=session_id)
    return row


def _job(ctx: Context, job_id: str) -> JobRow:
    row = ctx.view.job(job_id)
    if row is None:
        raise NotFound(f"job {job_id!r} does not exist", job_id=job_id)
    return row


def _task(ctx: Context, task_id: str) -> TaskRow:
    row = ctx.view.task(task_id)
    if row is None:
        raise NotFound(f"task {task_id!r} does not exist", task_id=task_id)
    return row


def _expect(command: c.Command, stream_id: str, version: int) -> None:
    """``If-Match``: a command may pin the version of the entity it targets."""
    expected = getattr(command, "expected_version", None)
    if expected is not None and expected != version:
        raise ConcurrencyError(stream_id, expected, version)


def _admit(ctx: Context, group: str | None, units: int) -> None:
    """Exact capacity check inside the write transaction (SPEC §4.7)."""
    if group is None:
        return
    limit = ctx.settings.resource_groups.get(group)
    if limit is None:
        raise InvalidArgument(f"resource group {group!r} is not configured", resource_group=group)
    used = ctx.view.units_held(group)
    if used + units > limit:
        raise AdmissionRejected(
            f"resource group {group!r} is at capacity: {used}/{limit} units held, "
            f"{units} requested",
            reason="capacity",
            resource_group=group,
            used=used,
            limit=limit,
            requested=units,
        )


def _overlaps(a: str, b: str) -> bool:
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    return a == b or a.startswith(b + "/") or b.startswith(a + "/") or "/" in (a, b)


def _check_write_scope(ctx: Context, scopes: Sequence[str]) -> None:
    held = ctx.view.write_scopes_held()
    for path in scopes:
        for job_id, other in held:
            if _overlaps(path, other):
                raise AdmissionRejected(
                    f"write scope {path!r} overlaps {other!r} held by job {job_id}",
                    reason="write_scope_conflict",
                    path=path,
                    held_by=job_id,
                    held_path=other,
                )


def _settle(ctx: Context, session_id: str, owed: Owed) -> None:
    """Clear the reply pointer if the session owes exactly this (after the terminal write)."""
    row = ctx.view.session(session_id)
    if row is not None and row.owes == owed and row.state not in session_.TERMINAL:
        ctx.append(f"session:{session_id}", session_.SessionSettled(owed=owed))


def _take_pointer(ctx: Context, session: SessionRow, owed: Owed) -> None:
    """SPEC §4.6: supersede an owed job, refuse over an A2A task or relay, then point."""
    current = session.owes
    if current is not None and current.kind in ("a2a", "relay"):
        what = "an A2A task" if current.kind == "a2a" else "a relay report"
        raise Conflict(
            f"session {session.session_id} owes {what} ({current.ref}); it takes no new "
            f"{'job' if owed.kind == 'job' else owed.kind} until that is settled",
            session_id=session.session_id,
            owes=current.kind,
            ref=current.ref,
        )
    if current is not None and current.kind == "job":
        earlier = ctx.view.job(current.ref)
        # A job already being cancelled is on its way out: the pointer just moves on.
        if earlier is not None and earlier.state in SUPERSEDABLE:
            by = owed.ref if owed.kind == "job" else f"{owed.kind}:{owed.ref}"
            ctx.append(f"job:{earlier.job_id}", job_.JobSuperseded(superseded_by=by))
    ctx.append(f"session:{session.session_id}", session_.SessionOwes(owed=owed))


def _end_work(ctx: Context, session_id: str, reason: str) -> None:
    """Before a session becomes terminal, in the same transaction: cancel every live job and
    open task of it, and clear whatever it still owes (no orphaned live work, no pointer left
    on a session that can never settle it)."""
    for job in ctx.view.live_jobs(session_id):
        events: list[Event] = []
        if job.state == J.RUNNING:
            events.append(job_.JobCancelRequested(reason=reason))
        events.append(job_.JobCancelled(reason=reason))
        ctx.append(f"job:{job.job_id}", *events)
    for task in ctx.view.open_tasks(session_id):
        ctx.append(f"task:{task.task_id}", task_.TaskCanceled(text=f"Session {reason}."))
    row = ctx.view.session(session_id)
    if row is not None and row.owes is not None:
        ctx.append(f"session:{session_id}", session_.SessionSettled(owed=row.owes))


# -- lease -------------------------------------------------------------------------------


def _next_epoch(ctx: Context, current: int) -> int:
    # Epochs are global to the log: the fence compares with the newest epoch of any stream.
    return max(current, ctx.log_epoch) + 1


def acquire_lease(cmd: c.AcquireLease, ctx: Context) -> None:
    row = ctx.view.lease(cmd.name)
    if row is not None and row.state == lease_.LeaseState.HELD:
        raise LeaseBusy(
            f"lease {cmd.name} is held by {row.holder} (epoch {row.epoch})",
            holder=row.holder,
            epoch=row.epoch,
        )
    epoch = _next_epoch(ctx, row.epoch if row else 0)
    ctx.append(
        f"lease:{cmd.name}",
        lease_.LeaseAcquired(holder=cmd.holder, host=cmd.host, pid=cmd.pid, epoch=epoch),
        epoch=epoch,
    )


def _held_by(ctx: Context, name: str, holder: str, epoch: int) -> None:
    row = ctx.view.lease(name)
    if (
        row is None
        or row.state != lease_.LeaseState.HELD
        or (row.holder, row.epoch) != (holder, epoch)
    ):
        raise NotLeaseHolder(
            f"{holder} does not hold lease {name} at epoch {epoch}",
            holder=row.holder if row else None,
            epoch=row.epoch if row else None,
        )


def renew_lease(cmd: c.RenewLease, ctx: Context) -> None:
    _held_by(ctx, cmd.name, cmd.holder, cmd.epoch)
    ctx.append(
        f"lease:{cmd.name}",
        lease_.LeaseRenewed(holder=cmd.holder, epoch=cmd.epoch),
        epoch=cmd.epoch,
    )


def take_over_lease(cmd: c.TakeOverLease, ctx: Context) -> None:
    row = ctx.view.lease(cmd.name)
    if row is None or row.state != lease_.LeaseState.HELD:
        raise InvalidTransition(
            f"lease:{cmd.name}",
            row.state if row else None,
            "lease.taken_over",
            "the lease is free: acquire it",
        )
    age = (ctx.now - parse_time(row.renewed_at)).total_seconds()
    if age <= ctx.settings.lease_stale_s:
        raise LeaseBusy(
            f"lease {cmd.name} is held by {row.holder} (renewed {age:.1f} s ago, stale after "
            f"{ctx.settings.lease_stale_s:g} s)",
            holder=row.holder,
            epoch=row.epoch,
            age_s=age,
        )
    epoch = _next_epoch(ctx, row.epoch)
    ctx.append(
        f"lease:{cmd.name}",
        lease_.LeaseTakenOver(
            holder=cmd.holder,
            host=cmd.host,
            pid=cmd.pid,
            epoch=epoch,
            previous_holder=row.holder,
            previous_epoch=row.epoch,
        ),
        epoch=epoch,
    )


def release_lease(cmd: c.ReleaseLease, ctx: Context) -> None:
    _held_by(ctx, cmd.name, cmd.holder, cmd.epoch)
    ctx.append(
        f"lease:{cmd.name}",
        lease_.LeaseReleased(holder=cmd.holder, epoch=cmd.epoch),
        epoch=cmd.epoch,
    )


# -- session -----------------------------------------------------------------------------


def create_session(cmd: c.CreateSession, ctx: Context) -> None:
    if ctx.view.session(cmd.session_id) is not None:
        raise AlreadyExists(f"session {cmd.session_id!r} exists", session_id=cmd.session_id)
    _admit(ctx, cmd.resource_group, cmd.units)
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
    ctx.append(f"session:{cmd.session_id}", *events)


def _session_for(cmd: Any, ctx: Context) -> SessionRow:
    row = _session(ctx, cmd.session_id)
    _expect(cmd, f"session:{row.session_id}", row.version)
    return row


def start_session(cmd: c.StartSession, ctx: Context) -> None:
    _session_for(cmd, ctx)
    ctx.append(
        f"session:{cmd.session_id}",
        session_.SessionStarted(run_id=cmd.run_id, pid=cmd.pid, start_token=cmd.start_token),
    )


def detach_session(cmd: c.DetachSession, ctx: Context) -> None:
    _session_for(cmd, ctx)
    ctx.append(f"session:{cmd.session_id}", session_.SessionDetached(by=cmd.by))


def _readmit_session(ctx: Context, row: SessionRow) -> None:
    if row.state in (S.PAUSED, S.SUSPENDED):  # these released their capacity
        _admit(ctx, row.resource_group, row.units)


def attach_session(cmd: c.AttachSession, ctx: Context) -> None:
    row = _session_for(cmd, ctx)
    _readmit_session(ctx, row)
    ctx.append(f"session:{cmd.session_id}", session_.SessionAttached())


def pause_session(cmd: c.PauseSession, ctx: Context) -> None:
    _session_for(cmd, ctx)
    ctx.append(f"session:{cmd.session_id}", session_.SessionPaused())
    for job in ctx.view.live_jobs(cmd.session_id):  # a cold pause pauses its running jobs
        if job.state == J.RUNNING:
            ctx.append(f"job:{job.job_id}", job_.JobPaused())


def suspend_session(cmd: c.SuspendSession, ctx: Context) -> None:
    _session_for(cmd, ctx)
    ctx.append(f"session:{cmd.session_id}", session_.SessionSuspended(reason=cmd.reason))


def resume_session(cmd: c.ResumeSession, ctx: Context) -> None:
    row = _session_for(cmd, ctx)
    if row.tainted and not cmd.allow_tainted and row.state not in session_.TERMINAL:
        raise Conflict(
            f"session {row.session_id} is tainted; resume it with allow_tainted",
            session_id=row.session_id,
        )
    _readmit_session(ctx, row)
    ctx.append(f"session:{cmd.session_id}", session_.SessionResumed(run_id=cmd.run_id or ""))


def finish_session(cmd: c.FinishSession, ctx: Context) -> None:
    row = _session_for(cmd, ctx)
    if row.state == S.DETACHED and row.detached_by == "operator":
        raise InvalidTransition(
            f"session:{row.session_id}",
            row.state,
            "session.finishing",
            "an operator detach wins over a late finish",
        )
    stream_id = f"session:{row.session_id}"
    if row.state != S.FINISHING:
        ctx.append(stream_id, session_.SessionFinishing(requested=cmd.requested, error=cmd.error))
    requested = cmd.requested if row.state != S.FINISHING else (row.requested or cmd.requested)
    recoverable = [j for j in ctx.view.live_jobs(row.session_id) if j.state != J.CANCELLING]
    if recoverable:  # work remains that can be resumed: the session is detached, not ended
        ctx.append(stream_id, session_.SessionFinished(outcome="detached"))
        return
    _end_work(ctx, row.session_id, f"session {requested}")
    ctx.append(stream_id, session_.SessionFinished(outcome=requested))


def _close(
    ctx: Context,
    row: SessionRow,
    closing: Event,
    closed: Event,
    in_progress: str,
    wait: bool,
    reason: str,
) -> None:
    stream_id = f"session:{row.session_id}"
    if row.state != in_progress:
        ctx.append(stream_id, closing)
        if wait:
            return
    _end_work(ctx, row.session_id, reason)
    ctx.append(stream_id, closed)


def stop_session(cmd: c.StopSession, ctx: Context) -> None:
    row = _session_for(cmd, ctx)
    _close(
        ctx,
        row,
        session_.SessionStopping(reason=cmd.reason),
        session_.SessionStopped(),
        S.STOPPING,
        cmd.wait,
        cmd.reason or "session stopped",
    )


def cancel_session(cmd: c.CancelSession, ctx: Context) -> None:
    row = _session_for(cmd, ctx)
    _close(
        ctx,
        row,
        session_.SessionCancelling(reason=cmd.reason),
        session_.SessionCancelled(),
        S.CANCELLING,
        cmd.wait,
        cmd.reason or "session cancelled",
    )


def taint_session(cmd: c.TaintSession, ctx: Context) -> None:
    _session_for(cmd, ctx)
    ctx.append(f"session:{cmd.session_id}", session_.SessionTainted(reason=cmd.reason))


def owe_relay(cmd: c.OweRelay, ctx: Context) -> None:
    row = _session_for(cmd, ctx)
    _take_pointer(ctx, row, Owed("relay", cmd.to_session))


def settle_relay(cmd: c.SettleRelay, ctx: Context) -> None:
    row = _session_for(cmd, ctx)
    if row.owes is None or row.owes.kind != "relay":
        raise Conflict(f"session {row.session_id} owes no relay report", session_id=row.session_id)
    ctx.append(f"session:{row.session_id}", session_.SessionSettled(owed=row.owes))


# -- job ---------------------------------------------------------------------------------


def _admitting(ctx: Context, session: SessionRow, what: str) -> None:
    if session.tainted:
        raise Conflict(
            f"session {session.session_id} is tainted: it admits no new {what}",
            session_id=session.session_id,
        )
    if session.state not in ADMITTING:
        raise Conflict(
            f"session {session.session_id} is {session.state}: it admits no new {what}",
            session_id=session.session_id,
            state=session.state,
        )


def accept_job(cmd: c.AcceptJob, ctx: Context) -> None:
    if ctx.view.job(cmd.job_id) is not None:
        raise AlreadyExists(f"job {cmd.job_id!r} exists", job_id=cmd.job_id)
    session = _session(ctx, cmd.session_id)
    _admitting(ctx, session, "jobs")
    depth = 1
    if cmd.parent_job is not None:
        parent = _job(ctx, cmd.parent_job)
        if parent.session_id != cmd.session_id or parent.state not in SPAWNING:
            raise Conflict(
                f"job {parent.job_id} ({parent.state}, session {parent.session_id}) "
                "cannot spawn here",
                job_id=parent.job_id,
            )
        depth = parent.depth + 1
        if depth > ctx.settings.max_depth:
            raise AdmissionRejected(
                f"depth {depth} exceeds {ctx.settings.max_depth}",
                reason="depth",
                depth=depth,
                limit=ctx.settings.max_depth,
            )
    _admit(ctx, cmd.resource_group, cmd.units)
    _check_write_scope(ctx, cmd.write_scope)
    if cmd.owed:  # checks the pointer (may refuse) before anything is appended
        _take_pointer(ctx, session, Owed("job", cmd.job_id))
    ctx.append(
        f"job:{cmd.job_id}",
        job_.JobAccepted(
            session=cmd.session_id,
            prompt=cmd.prompt,
            prompt_file=cmd.prompt_file,
            agent=cmd.agent,
            parent_job=cmd.parent_job,
            depth=depth,
            batch=cmd.batch,
            resource_group=cmd.resource_group,
            units=cmd.units,
            write_scope=cmd.write_scope,
            task=cmd.task_id,
        ),
    )


def accept_jobs(cmd: c.AcceptJobs, ctx: Context) -> None:
    # Items are decided one after another in one transaction: each sees the capacity and
    # scopes the earlier ones took, and any refusal rolls the whole batch back.
    for item in cmd.jobs:
        accept_job(item, ctx)


def _job_for(cmd: Any, ctx: Context) -> JobRow:
    row = _job(ctx, cmd.job_id)
    _expect(cmd, f"job:{row.job_id}", row.version)
    return row


def start_job(cmd: c.StartJob, ctx: Context) -> None:
    row = _job_for(cmd, ctx)
    if row.state in (J.PAUSED, J.SUSPENDED):  # these released their capacity
        _admit(ctx, row.resource_group, row.units)
    ctx.append(
        f"job:{row.job_id}",
        job_.JobStarted(
            run_id=cmd.run_id,
            pid=cmd.pid,
            start_token=cmd.start_token,
            epoch=cmd.epoch,
            resumed=cmd.resumed,
        ),
    )
    task = ctx.view.task(row.task_id) if row.task_id else None
    if task is not None and task.state in (T.SUBMITTED, T.INPUT_REQUIRED, T.AUTH_REQUIRED):
        ctx.append(f"task:{task.task_id}", task_.TaskStatusUpdated(text=""))


def finish_job(cmd: c.FinishJob, ctx: Context) -> None:
    row = _job_for(cmd, ctx)
    ctx.append(
        f"job:{row.job_id}",
        job_.JobFinished(
            outcome=cmd.outcome,
            result=cmd.result,
            files=cmd.files,
            exit_code=cmd.exit_code,
            warnings=cmd.warnings,
        ),
    )
    _settle(ctx, row.session_id, Owed("job", row.job_id))
    _end_task_of(ctx, row, cmd.outcome, cmd.result)


def _end_task_of(ctx: Context, job: JobRow, outcome: str, text: str) -> None:
    """The job worked for an A2A task: its end is the task's end, in the same transaction."""
    task = ctx.view.task(job.task_id) if job.task_id else None
    if task is None or task.state in task_.TERMINAL:
        return
    event: Event = (
        task_.TaskCompleted(result=text) if outcome == "ok" else task_.TaskFailed(text=text)
    )
    ctx.append(f"task:{task.task_id}", event)
    _settle(ctx, task.session_id, Owed("a2a", task.task_id))


def record_job_output(cmd: c.RecordJobOutput, ctx: Context) -> None:
    row = _job_for(cmd, ctx)
    ctx.append(f"job:{row.job_id}", job_.JobOutput(text=cmd.text))


def supersede_job(cmd: c.SupersedeJob, ctx: Context) -> None:
    row = _job_for(cmd, ctx)
    ctx.append(f"job:{row.job_id}", job_.JobSuperseded(superseded_by=cmd.superseded_by))
    _settle(ctx, row.session_id, Owed("job", row.job_id))


def pause_job(cmd: c.PauseJob, ctx: Context) -> None:
    row = _job_for(cmd, ctx)
    ctx.append(f"job:{row.job_id}", job_.JobPaused())


def continue_job(cmd: c.ContinueJob, ctx: Context) -> None:
    row = _job_for(cmd, ctx)
    if row.state == J.PAUSED:
        _admit(ctx, row.resource_group, row.units)
    ctx.append(f"job:{row.job_id}", job_.JobContinued())


def suspend_job(cmd: c.SuspendJob, ctx: Context) -> None:
    row = _job_for(cmd, ctx)
    ctx.append(f"job:{row.job_id}", job_.JobSuspended(reason=cmd.reason))


def _cancel_one(ctx: Context, job: JobRow, reason: str) -> None:
    if job.state in (J.RUNNING, J.CANCELLING):  # its runner confirms once the process is gone
        ctx.append(f"job:{job.job_id}", job_.JobCancelRequested(reason=reason))
        return
    ctx.append(f"job:{job.job_id}", job_.JobCancelled(reason=reason))
    _settle(ctx, job.session_id, Owed("job", job.job_id))


def cancel_job(cmd: c.CancelJob, ctx: Context) -> None:
    row = _job_for(cmd, ctx)
    descendants = ctx.view.live_descendants(row.job_id)
    _cancel_one(ctx, row, cmd.reason)  # refused by the machine if it is terminal
    for child in descendants:
        _cancel_one(ctx, child, cmd.reason or f"ancestor {row.job_id} cancelled")


def confirm_job_cancelled(cmd: c.ConfirmJobCancelled, ctx: Context) -> None:
    row = _job_for(cmd, ctx)
    ctx.append(f"job:{row.job_id}", job_.JobCancelled())
    _settle(ctx, row.session_id, Owed("job", row.job_id))


def record_notify_started(cmd: c.RecordNotifyStarted, ctx: Context) -> None:
    row = _job_for(cmd, ctx)
    ctx.append(f"job:{row.job_id}", job_.JobNotifyStarted(pid=cmd.pid))


def record_notify_finished(cmd: c.RecordNotifyFinished, ctx: Context) -> None:
    row = _job_for(cmd, ctx)
    ctx.append(
        f"job:{row.job_id}",
        job_.JobNotifyFinished(
            exit_code=cmd.exit_code,
            ms=cmd.ms,
            stdout_tail=cmd.stdout_tail,
            stderr_tail=cmd.stderr_tail,
        ),
    )


# -- task --------------------------------------------------------------------------------


def create_task(cmd: c.CreateTask, ctx: Context) -> None:
    if ctx.view.task(cmd.task_id) is not None:
        raise AlreadyExists(f"task {cmd.task_id!r} exists", task_id=cmd.task_id)
    session = _session(ctx, cmd.session_id)
    _admitting(ctx, session, "tasks")
    _take_pointer(ctx, session, Owed("a2a", cmd.task_id))
    ctx.append(
        f"task:{cmd.task_id}",
        task_.TaskCreated(context=cmd.session_id, message_id=cmd.message_id, text=cmd.text),
    )


def _task_event(event: Callable[[Any], Event], ends: bool) -> Callable[[Any, Context], None]:
    def rule(cmd: Any, ctx: Context) -> None:
        row = _task(ctx, cmd.task_id)
        _expect(cmd, f"task:{row.task_id}", row.version)
        ctx.append(f"task:{row.task_id}", event(cmd))
        if ends:
            _settle(ctx, row.session_id, Owed("a2a", row.task_id))
            for job in ctx.view.live_jobs(row.session_id):  # the work for it stops too
                if job.task_id == row.task_id:
                    _cancel_one(ctx, job, f"task {row.task_id} ended")

    return rule


_HANDLERS: dict[type, Callable[[Any, Context], None]] = {
    c.AcquireLease: acquire_lease,
    c.RenewLease: renew_lease,
    c.TakeOverLease: take_over_lease,
    c.ReleaseLease: release_lease,
    c.CreateSession: create_session,
    c.StartSession: start_session,
    c.DetachSession: detach_session,
    c.AttachSession: attach_session,
    c.PauseSession: pause_session,
    c.SuspendSession: suspend_session,
    c.ResumeSession: resume_session,
    c.FinishSession: finish_session,
    c.StopSession: stop_session,
    c.CancelSession: cancel_session,
    c.TaintSession: taint_session,
    c.OweRelay: owe_relay,
    c.SettleRelay: settle_relay,
    c.AcceptJob: accept_job,
    c.AcceptJobs: accept_jobs,
    c.StartJob: start_job,
    c.FinishJob: finish_job,
    c.RecordJobOutput: record_job_output,
    c.SupersedeJob: supersede_job,
    c.PauseJob: pause_job,
    c.ContinueJob: continue_job,
    c.SuspendJob: suspend_job,
    c.CancelJob: cancel_job,
    c.ConfirmJobCancelled: confirm_job_cancelled,
    c.RecordNotifyStarted: record_notify_started,
    c.RecordNotifyFinished: record_notify_finished,
    c.CreateTask: create_task,
    c.UpdateTaskStatus: _task_event(lambda cmd: task_.TaskStatusUpdated(text=cmd.text), False),
    c.RequireTaskInput: _task_event(lambda cmd: task_.TaskInputRequired(text=cmd.text), False),
    c.RequireTaskAuth: _task_event(lambda cmd: task_.TaskAuthRequired(text=cmd.text), False),
    c.CompleteTask: _task_event(lambda cmd: task_.TaskCompleted(result=cmd.result), True),
    c.FailTask: _task_event(lambda cmd: task_.TaskFailed(text=cmd.text), True),
    c.CancelTask: _task_event(lambda cmd: task_.TaskCanceled(text=cmd.text), True),
    c.RejectTask: _task_event(lambda cmd: task_.TaskRejected(text=cmd.text), True),
}
