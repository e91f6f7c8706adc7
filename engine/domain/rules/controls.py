"""A caller's controls of a job (ADR 0057; the source system's ``control_job`` and
``fork_job``): each checked for its grant and for the job's control revision, once, by
``engine.domain.rules.job.controller`` before anything is recorded, then done as the server's
own command does it. A fork is a job of the source's agent, session and write scope, seeded
with the source's prompt and its output so far, recorded on the source (``job.forked``) and
admitted like any spawn below the calling job (lineage follows the controller), with
``forked_from`` on its ``job.accepted``."""

from __future__ import annotations

from engine.domain import controls as ctl
from engine.domain import ids, pausing
from engine.domain import job as job_
from engine.domain.errors import Conflict
from engine.domain.job import JobState as J
from engine.domain.rules import job as job_rules
from engine.domain.rules import lineage, lookups
from engine.domain.rules import pause as pause_rules
from engine.domain.rules.registry import Context, rule
from engine.errors import InvalidArgument


@rule(ctl.ControlJob)
def control_job(cmd: ctl.ControlJob, ctx: Context) -> None:
    """Pause, continue or cancel a job for a caller. The caller and the revision are checked
    once, by ``job_rules.controller``: in ``PauseJob``'s and ``ContinueJob``'s rules for a
    pause and a continue, here for a cancel and a relaunch.

    Raises:
        NotGranted, Forbidden, Unauthorized: the caller may not.
        StaleRevision: the job's control revision moved.
        Conflict: a relaunch of a job that is neither suspended nor paused.
        InvalidTransition, AdmissionRejected: as the server's own command.
    """
    row = lookups.job_for(cmd, ctx)
    caller, digest, expected = cmd.caller_job, cmd.caller_token_digest, cmd.expected_revision
    if cmd.action == "pause":
        pause = pausing.PauseJob(
            job_id=row.job_id,
            mode=cmd.mode,
            grace_s=cmd.grace_s,
            caller_job=caller,
            caller_token_digest=digest,
            expected_revision=expected,
        )
        pause_rules.pause_job(pause, ctx)
        return
    if cmd.action == "continue" and not cmd.relaunch:
        go_on = pausing.ContinueJob(
            job_id=row.job_id,
            caller_job=caller,
            caller_token_digest=digest,
            expected_revision=expected,
        )
        pause_rules.continue_job(go_on, ctx)
        return
    action = "cancel" if cmd.action == "cancel" else "continue"
    by = job_rules.controller(ctx, row, action, caller, digest, expected)
    if cmd.action == "cancel":
        lineage.cancel_with_descendants(ctx, row, cmd.reason)
    elif row.state in (J.PAUSED, J.SUSPENDED):  # its new run's start follows in this write
        ctx.append(ids.job(row.job_id), job_.JobRelaunched(by=by))
    else:
        raise Conflict(f"job {row.job_id} is {row.state}: nothing to relaunch", job_id=row.job_id)


@rule(ctl.ForkJob)
def fork_job(cmd: ctl.ForkJob, ctx: Context) -> None:
    """Record the fork on the source, then admit the new job.

    Raises:
        NotGranted, Forbidden, Unauthorized: the caller may not fork the source.
        StaleRevision: the source's control revision moved.
        InvalidTransition: the source has ended.
        InvalidArgument: the new job is not the source's fork below the caller.
        AdmissionRejected: capacity, ``max_children``, a write scope taken (a live writer's
            scope is its own until a cold pause retires its run or it is suspended).
    """
    source = lookups.job(ctx, cmd.job_id)
    by = job_rules.controller(
        ctx, source, "fork", cmd.caller_job, cmd.caller_token_digest, cmd.expected_revision
    )
    fork = cmd.fork
    if (
        fork.session_id != source.session_id
        or fork.agent != source.agent
        or tuple(fork.write_scope) != source.write_scope
        or fork.parent_job != cmd.caller_job
        or fork.owed
        or fork.task_id is not None
    ):
        raise InvalidArgument(
            f"job {fork.job_id} is no fork of {source.job_id}: a fork has its source's session,"
            " agent and write scope, its caller as parent, and owes nobody"
        )
    ctx.append(ids.job(source.job_id), job_.JobForked(fork=fork.job_id, by=by))
    job_rules.accept(fork, ctx, forked_from=source.job_id)
