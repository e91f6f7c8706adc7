"""Job rules (design.md §4.4): accept (one or a batch), start, finish, output, supersede,
cancel and confirm, and the notify records; who may control a job (``controller``, the one
check of a caller's job control, ADR 0057); a pause's rules are ``engine.domain.rules.pause``.
A job that works for an A2A task ends the task with it. A job owed to a caller whose run
ends while jobs below it are live waits ``settling`` for them (the quiet gate,
``engine.domain.rules.quiet``, ADR 0050). A writer starts only in a git worktree, and finishes
with the patch of what it changed there (if anything)."""

from __future__ import annotations

from engine.domain import commands as c
from engine.domain import ids
from engine.domain import job as job_
from engine.domain import task as task_
from engine.domain.errors import AdmissionRejected, AlreadyExists, Conflict
from engine.domain.job import JobState as J
from engine.domain.rows import JobRow
from engine.domain.rules import admission, contract, lineage, lookups, pointer, roles
from engine.domain.rules import session as session_rules
from engine.domain.rules.lookups import job_for
from engine.domain.rules.registry import Context, rule
from engine.domain.session import Owed
from engine.domain.task import TaskState as T
from engine.errors import InvalidArgument


@rule(c.AcceptJob)
def accept_job(cmd: c.AcceptJob, ctx: Context) -> None:
    accept(cmd, ctx)


def accept(cmd: c.AcceptJob, ctx: Context, forked_from: str | None = None) -> None:
    """Admit one new job and record it: a spawn, or a fork of ``forked_from`` (whose rule,
    ``engine.domain.rules.controls``, checked the caller's fork grant in place of
    ``can_spawn``)."""
    if ctx.view.job(cmd.job_id) is not None:
        raise AlreadyExists(f"job {cmd.job_id!r} exists", job_id=cmd.job_id)
    session = lookups.session(ctx, cmd.session_id)
    admission.admitting(session, "jobs")
    depth = lineage.depth_below(ctx, cmd.session_id, cmd.parent_job)
    parent = ctx.view.job(cmd.parent_job) if cmd.parent_job else None
    roles.check_spawn(ctx, cmd, parent, forked=forked_from is not None)
    admission.admit(ctx, cmd.resource_group, cmd.units)
    admission.check_write_scope(ctx, cmd.write_scope)
    if cmd.root:
        session_rules.check_root_agent(session, cmd.agent)
    if cmd.owed:  # checks the pointer (may refuse) before anything is appended
        pointer.check_covers(ctx, session, cmd.covers)
        pointer.take(ctx, session, Owed("job", cmd.job_id))
    elif cmd.covers:
        raise InvalidArgument(f"job {cmd.job_id} covers jobs but takes no reply pointer")
    ctx.append(
        ids.job(cmd.job_id),
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
            covers=cmd.covers or (),
            agent_ignored=cmd.agent_ignored,
            forked_from=forked_from,
        ),
    )


@rule(c.AcceptJobs)
def accept_jobs(cmd: c.AcceptJobs, ctx: Context) -> None:
    # Items are decided one after another in one transaction: each sees the capacity and
    # scopes the earlier ones took, and any refusal rolls the whole batch back.
    for item in cmd.jobs:
        accept_job(item, ctx)


def worktree_of(cmd: c.StartJob, row: JobRow) -> tuple[str, str]:
    """The worktree and base commit a start records.

    A writer (a job with a write scope) works in its own git worktree, so its change can be
    captured as a patch and integrated later; a resumed start goes on in the worktree it was
    given, and takes its base commit when it names none.

    Raises:
        AdmissionRejected: ``writable_target_not_git``: a writer started without a worktree.
        Conflict: a resumed start names another worktree or base commit than the recorded.
    """
    if row.write_scope and not cmd.worktree:
        raise AdmissionRejected(
            f"job {row.job_id} writes (write_scope {', '.join(row.write_scope)}) and needs a"
            " git worktree: the workspace is not a git repository with a commit",
            reason="writable_target_not_git",
            job_id=row.job_id,
        )
    if not (cmd.resumed and row.worktree):
        return cmd.worktree, cmd.base_commit
    base = cmd.base_commit or row.base_commit or ""
    if cmd.worktree != row.worktree or base != (row.base_commit or base):
        raise Conflict(
            f"job {row.job_id} resumes in worktree {row.worktree}"
            f" at {row.base_commit or 'an unknown commit'}, not in {cmd.worktree or 'none'}"
            f" at {cmd.base_commit or 'an unknown commit'}",
            job_id=row.job_id,
        )
    return cmd.worktree, base


@rule(c.StartJob)
def start_job(cmd: c.StartJob, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    worktree, base_commit = worktree_of(cmd, row)
    # A relaunch: a continue's (its ``ControlJob`` with ``relaunch``, checked and recorded
    # earlier in this write, ADR 0057), a session's continue, or recovery's resume.
    if row.state in (J.PAUSED, J.SUSPENDED) and not holds_capacity(row):
        readmit(ctx, row)  # suspended, or a cold pause whose run is gone
    ctx.append(
        ids.job(row.job_id),
        job_.JobStarted(
            run_id=cmd.run_id,
            pid=cmd.pid,
            start_token=cmd.start_token,
            epoch=cmd.epoch,
            resumed=cmd.resumed,
            token_digest=cmd.token_digest,
            worktree=worktree,
            base_commit=base_commit,
            input=cmd.input,
            trace=cmd.trace,
        ),
    )
    task = ctx.view.task(row.task_id) if row.task_id else None
    if task is not None and task.state in (T.SUBMITTED, T.INPUT_REQUIRED, T.AUTH_REQUIRED):
        ctx.append(ids.task(task.task_id), task_.TaskStatusUpdated(text=""))


def holds_capacity(job: JobRow) -> bool:
    """Whether ``job`` still holds its units and write scope (``job_.HOLDS_CAPACITY``): a
    live pause keeps them, a cold pause whose run is gone does not (ADR 0058)."""
    return job.state in job_.HOLDS_CAPACITY and job.pause != job_.PAUSE_RETIRED


def controller(
    ctx: Context,
    job: JobRow,
    action: str,
    caller_job: str | None,
    digest: str | None,
    expected_revision: int | None = None,
) -> str:
    """Who may use the control ``action`` on ``job``: the operator (no calling job), or the
    live run of one of its ancestors in its session whose agent is granted ``action`` on the
    job's agent (``roles.controller``, ADR 0057); and, when ``expected_revision`` names one,
    the job must still be at that control revision. Returns the controller's name. The one
    place a caller's job control is checked: pause, continue, cancel and relaunch.

    Raises:
        Unauthorized: the run token is not a live run's.
        Forbidden: the caller is not an ancestor of ``job``.
        NotGranted: the caller's agent lacks the grant.
        StaleRevision: another control was recorded since the caller looked.
    """
    by = roles.controller(ctx, caller_job, digest, job, action)
    lookups.expect_revision(expected_revision, job)
    return by


def readmit(ctx: Context, job: JobRow) -> None:
    """A paused or suspended job released its capacity: taking it back is admitted like new
    work (design.md §5.5): resource group, role counts, write-scope overlap."""
    parent = ctx.view.job(job.parent_job) if job.parent_job else None
    roles.check_counts(ctx, job.agent, job.session_id, parent, bool(job.write_scope))
    admission.admit(ctx, job.resource_group, job.units)
    admission.check_write_scope(ctx, job.write_scope)


@rule(c.FinishJob)
def finish_job(cmd: c.FinishJob, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    if cmd.run_id is not None and cmd.run_id != row.run_id:
        raise Conflict(
            f"run {cmd.run_id} of job {row.job_id} is not its current run {row.run_id}",
            job_id=row.job_id,
        )
    # The quiet gate (ADR 0050): a job owed to a caller ends only once its subtree is quiet;
    # until then its run's end is recorded and it waits, settling, for the last live job below
    # it (``quiet.complete_quiet_ancestors``, in the commit that ends that one).
    settling = pointer.is_owed(ctx, row) and bool(ctx.view.live_descendants(row.job_id))
    outcome = contract.outcome(ctx, row, cmd)
    # A strict contract's failure says why in the result, as a timeout does (ADR 0065).
    text = cmd.result if outcome == cmd.outcome else contract.broken(cmd)
    ctx.append(
        ids.job(row.job_id),
        job_.JobFinished(
            outcome=outcome,
            result=text,
            files=cmd.files,
            exit_code=cmd.exit_code,
            warnings=cmd.warnings,
            patch=cmd.patch,
            settling=settling,
            contract_valid=cmd.contract_valid,
            contract_errors=cmd.contract_errors,
        ),
    )
    if not settling:
        pointer.settle(ctx, row.session_id, Owed("job", row.job_id))
        structured = cmd.contract_valid is True
        pointer.end_task_of(ctx, row, outcome, text, cmd.warnings, cmd.files, structured)


@rule(c.RecordJobOutput)
def record_job_output(cmd: c.RecordJobOutput, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    ctx.append(ids.job(row.job_id), job_.JobOutput(text=cmd.text))


@rule(c.SupersedeJob)
def supersede_job(cmd: c.SupersedeJob, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    ctx.append(ids.job(row.job_id), job_.JobSuperseded(superseded_by=cmd.superseded_by))
    pointer.settle(ctx, row.session_id, Owed("job", row.job_id))


@rule(c.FailJobResume)
def fail_job_resume(cmd: c.FailJobResume, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    ctx.append(ids.job(row.job_id), job_.JobResumeFailed(reason=cmd.reason))
    pointer.settle(ctx, row.session_id, Owed("job", row.job_id))
    pointer.end_task_of(ctx, row, "error", cmd.reason)


@rule(c.CancelJob)
def cancel_job(cmd: c.CancelJob, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    lineage.cancel_with_descendants(ctx, row, cmd.reason)


@rule(c.ConfirmJobCancelled)
def confirm_job_cancelled(cmd: c.ConfirmJobCancelled, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    ctx.append(ids.job(row.job_id), job_.JobCancelled(confirms=True))
    pointer.settle(ctx, row.session_id, Owed("job", row.job_id))


@rule(c.RecordNotifyStarted)
def record_notify_started(cmd: c.RecordNotifyStarted, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    ctx.append(ids.job(row.job_id), job_.JobNotifyStarted(pid=cmd.pid))


@rule(c.RecordNotifyFinished)
def record_notify_finished(cmd: c.RecordNotifyFinished, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    ctx.append(
        ids.job(row.job_id),
        job_.JobNotifyFinished(
            exit_code=cmd.exit_code,
            ms=cmd.ms,
            stdout_tail=cmd.stdout_tail,
            stderr_tail=cmd.stderr_tail,
        ),
    )


@rule(c.RecordNotifyLost)
def record_notify_lost(cmd: c.RecordNotifyLost, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    ctx.append(ids.job(row.job_id), job_.JobNotifyLost(pid=cmd.pid, reason=cmd.reason))
