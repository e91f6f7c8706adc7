"""A finished job's result (design.md §4.8): the first read is recorded; accept or reject
once, from ``read``, by an ancestor's live run or the operator; integrate once, from
``accepted``, never on a tainted session. The order itself is the ``result`` machine's."""

from __future__ import annotations

from engine.domain import commands as c
from engine.domain import ids
from engine.domain import result as result_
from engine.domain.errors import Conflict, Forbidden
from engine.domain.job import JobState as J
from engine.domain.rows import JobRow
from engine.domain.rules import lookups
from engine.domain.rules.registry import Context, rule
from engine.domain.rules.roles import ancestors, live_caller

HAS_RESULT = frozenset({J.OK, J.ERROR})


def _finished(ctx: Context, cmd: c.ResultCommand) -> JobRow:
    job = lookups.job(ctx, cmd.job_id)
    if job.state not in HAS_RESULT:
        raise Conflict(f"job {job.job_id} is {job.state}: it has no result", job_id=job.job_id)
    return job


def _caller(ctx: Context, cmd: c.ResultCommand, job: JobRow, *, ancestor: bool) -> str:
    """``operator``, or the id of the live calling job, which must be in the same session and,
    with ``ancestor``, above ``job`` in its lineage."""
    if cmd.caller_job is None:
        return "operator"
    caller = live_caller(ctx, cmd.caller_job, cmd.caller_token_digest or "")
    if caller.session_id != job.session_id:
        raise Forbidden(f"job {job.job_id} is in another session", job_id=job.job_id)
    if ancestor and caller.job_id not in {row.job_id for row in ancestors(ctx, job)}:
        raise Forbidden(
            f"job {caller.job_id} is not an ancestor of {job.job_id}", job_id=job.job_id
        )
    return caller.job_id


@rule(c.ReadJobResult)
def read_job_result(cmd: c.ReadJobResult, ctx: Context) -> None:
    job = _finished(ctx, cmd)
    by = _caller(ctx, cmd, job, ancestor=False)
    ctx.append(ids.result(job.job_id), result_.ResultRead(by=by))


@rule(c.AcceptJobResult)
def accept_job_result(cmd: c.AcceptJobResult, ctx: Context) -> None:
    job = _finished(ctx, cmd)
    by = _caller(ctx, cmd, job, ancestor=True)
    ctx.append(ids.result(job.job_id), result_.ResultAccepted(by=by, reason=cmd.reason))


@rule(c.RejectJobResult)
def reject_job_result(cmd: c.RejectJobResult, ctx: Context) -> None:
    job = _finished(ctx, cmd)
    by = _caller(ctx, cmd, job, ancestor=True)
    ctx.append(ids.result(job.job_id), result_.ResultRejected(by=by, reason=cmd.reason))


@rule(c.IntegrateJobResult)
def integrate_job_result(cmd: c.IntegrateJobResult, ctx: Context) -> None:
    job = _finished(ctx, cmd)
    by = _caller(ctx, cmd, job, ancestor=True)
    if lookups.session(ctx, job.session_id).tainted:
        raise Conflict(
            f"session {job.session_id} is tainted: nothing of it is integrated",
            session_id=job.session_id,
        )
    ctx.append(ids.result(job.job_id), result_.ResultIntegrated(by=by, sha256=cmd.sha256))
