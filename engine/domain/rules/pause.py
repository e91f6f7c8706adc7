"""Pause rules (ADR 0058): a live pause holds what the job holds, a cold one asks a run that
takes input to finalize and holds until its run is retired; a continue goes on with what a
live pause kept; a run lost while the server lives (or cut off by a crash) suspends the job; a
graceful stop's signal and a continue refused at re-admission are recorded. A caller's pause
and continue are checked by ``engine.domain.rules.job.controller`` (ADR 0057)."""

from __future__ import annotations

from engine.domain import channel as ch
from engine.domain import ids, pausing
from engine.domain import job as job_
from engine.domain.errors import Conflict
from engine.domain.job import JobState as J
from engine.domain.rows import JobRow
from engine.domain.rules import channel
from engine.domain.rules import job as job_rules
from engine.domain.rules.lookups import job_for
from engine.domain.rules.registry import Context, rule

# What a cold pause asks a run that takes input (its ``finalize`` control, ADR 0058).
PAUSE_FINALIZE_TEXT = (
    "You are being paused: finalize now from the evidence you already have and print what"
    " you have so far. A later run continues from your output."
)


@rule(pausing.PauseJob)
def pause_job(cmd: pausing.PauseJob, ctx: Context) -> None:
    """A live pause keeps what the job holds; a cold one asks a run that takes input to
    finalize first (its ``job.control``, recorded before the pause), and holds until its run
    is retired (ADR 0058).

    Raises:
        Conflict: a pause of a paused job that is not a live one made cold.
    """
    row = job_for(cmd, ctx)
    by = job_rules.controller(
        ctx, row, "pause", cmd.caller_job, cmd.caller_token_digest, cmd.expected_revision
    )
    if row.state == J.PAUSED and (cmd.mode != job_.PAUSE_COLD or row.pause != job_.PAUSE_LIVE):
        raise Conflict(
            f"job {row.job_id} is already paused ({row.pause or job_.PAUSE_LIVE})",
            job_id=row.job_id,
            pause=row.pause,
        )
    stream = ids.job(row.job_id)
    if cmd.mode == job_.PAUSE_COLD and channel.takes_input(row):
        ask = ch.SendControl(job_id=row.job_id, action="finalize", text=PAUSE_FINALIZE_TEXT)
        ctx.append(stream, channel.control(ctx, row, ask, by))
    mode = job_.PAUSE_COLD if cmd.mode == job_.PAUSE_COLD else ""
    grace = cmd.grace_s if mode else 0
    by_session = row.paused_by or "" if row.state == J.PAUSED else ""  # made cold: kept
    ctx.append(stream, job_.JobPaused(by=by_session, mode=mode, grace_s=grace))


@rule(pausing.ContinueJob)
def continue_job(cmd: pausing.ContinueJob, ctx: Context) -> None:
    """A live pause goes on with what it kept; a cold pause is continued by a new run.

    Raises:
        Conflict: the job is cold-paused (its run is being retired, or is gone).
    """
    row = job_for(cmd, ctx)
    job_rules.controller(
        ctx, row, "continue", cmd.caller_job, cmd.caller_token_digest, cmd.expected_revision
    )
    if row.state == J.PAUSED and row.pause not in (None, job_.PAUSE_LIVE):
        raise Conflict(
            f"job {row.job_id} is cold-paused: its run "
            + (
                "is still ending; continue it once it is gone"
                if row.pause == job_.PAUSE_COLD
                else "is gone, and a continue starts a new one"
            ),
            job_id=row.job_id,
            pause=row.pause,
        )
    ctx.append(ids.job(row.job_id), job_.JobContinued())


@rule(pausing.SuspendJob)
def suspend_job(cmd: pausing.SuspendJob, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    _current_run(cmd.run_id, row)
    ctx.append(ids.job(row.job_id), job_.JobSuspended(reason=cmd.reason, exit_code=cmd.exit_code))


@rule(pausing.RetireJob)
def retire_job(cmd: pausing.RetireJob, ctx: Context) -> None:
    """Raises:
    Conflict: the job is not cold-paused, or ``run_id`` is not its current run."""
    row = job_for(cmd, ctx)
    _current_run(cmd.run_id, row)
    if row.state != J.PAUSED or row.pause != job_.PAUSE_COLD:
        raise Conflict(f"job {row.job_id} is not being cold-paused", job_id=row.job_id)
    ctx.append(ids.job(row.job_id), job_.JobRetired(reason=cmd.reason, exit_code=cmd.exit_code))


@rule(pausing.SignalJob)
def signal_job(cmd: pausing.SignalJob, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    ctx.append(ids.job(row.job_id), job_.JobSignalled(signal=cmd.signal, reason=cmd.reason))


@rule(pausing.RefuseContinue)
def refuse_continue(cmd: pausing.RefuseContinue, ctx: Context) -> None:
    row = job_for(cmd, ctx)
    ctx.append(ids.job(row.job_id), job_.JobContinueRefused(reason=cmd.reason, by=cmd.by))


def _current_run(run_id: str | None, row: JobRow) -> None:
    if run_id is not None and run_id != row.run_id:
        raise Conflict(
            f"run {run_id} of job {row.job_id} is not its current run {row.run_id}",
            job_id=row.job_id,
        )
