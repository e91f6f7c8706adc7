"""A finished job's result (design.md §4.8): the first read is recorded; accept or reject
once, from ``read``, by an ancestor's live run or the operator; integrate from ``accepted``,
by the same, never on a tainted session, only the patch its job finished with, and one
integration of the workspace at a time. Integrating is recorded as an intent
(``BeginIntegration``) that the server then confirms (``ConfirmIntegration``) or undoes
(``UndoIntegration``, back to ``accepted``). The order itself is the ``result`` machine's."""

from __future__ import annotations

from engine.domain import commands as c
from engine.domain import ids
from engine.domain import result as result_
from engine.domain.errors import Conflict
from engine.domain.job import JobState as J
from engine.domain.rows import Integration, JobRow
from engine.domain.rules import lookups
from engine.domain.rules.registry import Context, rule
from engine.domain.rules.roles import caller_name
from engine.errors import InvalidTransition

HAS_RESULT = frozenset({J.OK, J.ERROR})


def _finished(ctx: Context, cmd: c.ResultCommand) -> JobRow:
    job = lookups.job(ctx, cmd.job_id)
    if job.state not in HAS_RESULT:
        raise Conflict(f"job {job.job_id} is {job.state}: it has no result", job_id=job.job_id)
    return job


@rule(c.ReadJobResult)
def read_job_result(cmd: c.ReadJobResult, ctx: Context) -> None:
    job = _finished(ctx, cmd)
    by = caller_name(ctx, cmd.caller_job, cmd.caller_token_digest, job, ancestor=False)
    ctx.append(ids.result(job.job_id), result_.ResultRead(by=by))


@rule(c.AcceptJobResult)
def accept_job_result(cmd: c.AcceptJobResult, ctx: Context) -> None:
    job = _finished(ctx, cmd)
    by = caller_name(ctx, cmd.caller_job, cmd.caller_token_digest, job, ancestor=True)
    ctx.append(ids.result(job.job_id), result_.ResultAccepted(by=by, reason=cmd.reason))


@rule(c.RejectJobResult)
def reject_job_result(cmd: c.RejectJobResult, ctx: Context) -> None:
    job = _finished(ctx, cmd)
    by = caller_name(ctx, cmd.caller_job, cmd.caller_token_digest, job, ancestor=True)
    ctx.append(ids.result(job.job_id), result_.ResultRejected(by=by, reason=cmd.reason))


@rule(c.BeginIntegration)
def begin_integration(cmd: c.BeginIntegration, ctx: Context) -> None:
    job = _finished(ctx, cmd)
    by = caller_name(ctx, cmd.caller_job, cmd.caller_token_digest, job, ancestor=True)
    if lookups.session(ctx, job.session_id).tainted:
        raise Conflict(
            f"session {job.session_id} is tainted: nothing of it is integrated",
            session_id=job.session_id,
        )
    if job.patch is None:
        raise Conflict(f"job {job.job_id} has no patch to integrate", job_id=job.job_id)
    if job.state != J.OK:  # an error, a scope overstepped among them: read, never applied
        raise Conflict(
            f"job {job.job_id} ended {job.state}: its patch is not integrated", job_id=job.job_id
        )
    if cmd.sha256 != job.patch.sha256:
        raise Conflict(
            f"patch {cmd.sha256} is not the one job {job.job_id} finished with"
            f" ({job.patch.sha256})",
            job_id=job.job_id,
        )
    # One at a time: each intent's trees are taken from the working tree as it was, so a
    # second one in flight would make the first's undo write over the second's files.
    for other in ctx.view.jobs_integrating():
        if other != job.job_id:
            raise Conflict(f"job {other} is being integrated", job_id=job.job_id)
    ctx.append(
        ids.result(job.job_id),
        result_.ResultIntegrating(
            by=by,
            sha256=cmd.sha256,
            before_tree=cmd.before_tree,
            after_tree=cmd.after_tree,
            paths=cmd.paths,
        ),
    )


def _integrating(ctx: Context, job_id: str, event_type: str) -> tuple[JobRow, Integration]:
    """The job and its recorded intent.

    Raises:
        NotFound: no such job.
        InvalidTransition: its result is not ``integrating``. Checked here, not left to the
            ``result`` machine: that one takes ``result.integrated`` from ``accepted`` too (the
            single step of older logs), and a confirmation needs an intent.
    """
    job = lookups.job(ctx, job_id)
    if job.integration is None or job.result_state != result_.R.INTEGRATING:
        raise InvalidTransition(
            ids.result(job_id),
            None if job.result_state in (None, result_.UNREAD) else job.result_state,
            event_type,
            "no integration is in flight",
        )
    return job, job.integration


@rule(c.ConfirmIntegration)
def confirm_integration(cmd: c.ConfirmIntegration, ctx: Context) -> None:
    job, intent = _integrating(ctx, cmd.job_id, "result.integrated")
    if cmd.tree != intent.after:
        raise Conflict(
            f"tree {cmd.tree} is not the one integrating job {job.job_id} leads to"
            f" ({intent.after})",
            job_id=job.job_id,
        )
    ctx.append(
        ids.result(job.job_id),
        result_.ResultIntegrated(
            by=intent.by, sha256=job.result_sha256 or "", tree=cmd.tree, paths=intent.paths
        ),
    )


@rule(c.UndoIntegration)
def undo_integration(cmd: c.UndoIntegration, ctx: Context) -> None:
    job, _ = _integrating(ctx, cmd.job_id, "result.integration_undone")
    ctx.append(ids.result(job.job_id), result_.ResultIntegrationUndone(reason=cmd.reason))
