"""Recovery after a crash (design.md §8): run when this server instance takes the lease, before it
dispatches anything new. Every decision is recorded as an event; nothing is "written on read".

1. The recent tail of the hash chain is checked.
2. The run ledger is swept: a run whose process is gone (pid + start token), or that belongs to
   an older epoch, was cut off; a run of an older epoch whose group still lives is an orphan of
   the killed server and is killed first (its output has nowhere to go).
3. Cut-off jobs are recorded ``job.suspended`` (a running or paused one; a cancelling one,
   ``job.cancelled``), cut-off session controllers ``session.suspended``.
4. A notify hook that started and never finished is recorded ``job.notify_lost``; it is never
   run again.
5. Every job cut off while it was owed to a caller (its session's pointer, or an open A2A
   task it works for) is resumed as a new run with ``FOLDLINE_RESUMED=1`` and its earlier
   output (not one that had been paused: that waits for a continue, which relaunches it).
   Its cut-off workers are not: they stay suspended until it (an ancestor's live run) or the
   operator continues them, so a root that plans again does not race its old workers (ADR
   0058). One that cannot be resumed (its prompt file is gone, its capacity is taken) is
   recorded ``job.resume_failed`` and recovery goes on: one bad entity never locks the
   workspace. A settling job (ADR 0050) has no run to resume and none to continue its
   workers: the cut-off jobs below it with no live run above them are resumed; a failure
   recorded for the last of them ends it, and that owed reply is handed on (``hand_on``).
6. The timeouts of design.md §4.3 are recorded for sessions with a controller (``record_timeouts``,
   also run by the holder at every lease renewal).

The port is narrow: the engine, a way to start a job again, the two graces, and a way to hand
on an owed reply a recorded failure made. Recovery knows nothing else of the server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from adapters.system import tracing
from adapters.system.processes import is_alive, kill_group
from engine.clock import parse_time
from engine.domain import commands as c
from engine.domain import pausing
from engine.domain.engine import DomainEngine
from engine.domain.job import PAUSE_COLD
from engine.domain.job import JobState as J
from engine.domain.session import SessionState as S
from engine.engine import CommandResult
from engine.errors import EngineError, StorageError
from projections import queries

log = logging.getLogger("foldline.recovery")
CHAIN_TAIL = 1000  # events whose chain links are checked at every acquisition
# A paused run cut off stays suspended until an operator continues it: recovery resumes only
# work that was running for a caller, never what somebody had paused.
PAUSED_CUT_OFF = "paused run cut off"
RUN_CUT_OFF = "run cut off"  # the reason of a running job's suspension by a crash
REASON_LIMIT = 900  # a resume failure's reason is recorded in a field of at most 1000 chars


class RecoveryFailed(StorageError):
    code = "recovery_failed"


@dataclass(frozen=True)
class Graces:
    """design.md §4.3: how long a controller may take to come up, and to go away."""

    start_s: float
    transition_s: float


def recover(
    engine: DomainEngine,
    resume: Callable[[str], None],
    graces: Graces,
    hand_on: Callable[[CommandResult], None] = lambda done: None,
) -> list[str]:
    """Sweep, record and resume; returns the ids of the jobs resumed.

    Raises:
        RecoveryFailed: the chain's tail does not verify.
    """
    with tracing.span("recovery", attributes={"foldline.epoch": engine.log.epoch}) as span:
        resumed = _recover(engine, resume, graces, hand_on)
        span.set("foldline.resumed", resumed)
        span.set("foldline.positions", [engine.log.head()])
    return resumed


def _recover(
    engine: DomainEngine,
    resume: Callable[[str], None],
    graces: Graces,
    hand_on: Callable[[CommandResult], None],
) -> list[str]:
    head = engine.log.head()
    problems = engine.log.verify_chain(after=max(0, head - CHAIN_TAIL))
    if problems:
        raise RecoveryFailed(f"the log's tail does not verify: {problems[:3]}")
    epoch = engine.log.epoch
    cut_off = 0
    for run in queries.runs(engine.log.connection()):
        kind, entity, pid = run.kind, run.entity_id, run.pid
        alive = is_alive(pid, run.start_token)
        if alive and run.epoch < epoch:
            log.warning(
                "killing orphan run of %s %s (pid %s, epoch %s)", kind, entity, pid, run.epoch
            )
            kill_group(pid)
            alive = False
        if alive:
            continue
        cut_off += 1
        try:
            if kind == "job":
                done = _cut_off_job(engine, entity)
                if done is not None:  # a cancel confirmed may end a settling job (ADR 0050)
                    hand_on(done)
            else:
                engine.handle(c.SuspendSession(session_id=entity, reason="controller lost"))
        except EngineError as ex:  # it moved on meanwhile: nothing to record
            log.info("run of %s %s not recorded as cut off: %s", kind, entity, ex)
    _record_lost_notifications(engine)
    record_timeouts(engine, graces)
    resumed = []
    for job_id in queries.resumable_jobs(engine.log.connection(), cut_off=RUN_CUT_OFF):
        try:
            resume(job_id)
        except Exception as ex:
            _record_resume_failed(engine, job_id, ex, hand_on)
            continue
        resumed.append(job_id)
    if resumed:
        log.warning("resumed %d cut-off job(s): %s", len(resumed), ", ".join(resumed))
    log.info(
        "recovery at epoch %d: %d run(s) cut off, %d job(s) resumed", epoch, cut_off, len(resumed)
    )
    return resumed


def _record_resume_failed(
    engine: DomainEngine, job_id: str, ex: Exception, hand_on: Callable[[CommandResult], None]
) -> None:
    detail = getattr(ex, "message", None) or str(ex) or type(ex).__name__
    reason = f"could not resume: {detail}"[:REASON_LIMIT]
    log.error("job %s %s", job_id, reason)
    try:
        done = engine.handle(c.FailJobResume(job_id=job_id, reason=reason))
    except EngineError as recorded:  # it moved on meanwhile (cancelled, superseded)
        log.info("resume failure of %s not recorded: %s", job_id, recorded)
        return
    hand_on(done)


def _record_lost_notifications(engine: DomainEngine) -> None:
    for pending in queries.pending_notifies(engine.log.connection()):
        job_id, pid = pending.job_id, pending.notify_pid
        # At most once: a hook cut off by the crash is reported, never run again.
        log.warning(
            "lost notification: the notify hook of %s (pid %s) started before the "
            "crash and never finished; it is not run again",
            job_id,
            pid,
        )
        try:
            engine.handle(
                c.RecordNotifyLost(job_id=job_id, pid=pid, reason="cut off by a server crash")
            )
        except EngineError as ex:
            log.info("lost notification of %s not recorded: %s", job_id, ex)


def record_timeouts(engine: DomainEngine, graces: Graces) -> None:
    """design.md §4.3, for sessions that record a controller: ``starting`` with no live controller
    past the start grace becomes ``failed`` (it never started) or ``suspended``; a closing
    state whose controller is gone past the transition grace reaches its terminal state."""
    now = engine.clock.now()
    conn = engine.log.connection()
    live = {
        run.entity_id for run in queries.session_runs(conn) if is_alive(run.pid, run.start_token)
    }
    for session in queries.controlled_sessions_in_transition(conn):
        session_id, state, run_id = session.session_id, session.state, session.run_id
        if session_id in live:
            continue
        age = (now - parse_time(session.updated_at)).total_seconds()
        command: c.Command | None = None
        if state == S.STARTING and age > graces.start_s:
            command = (
                c.SuspendSession(session_id=session_id, reason="controller never came up")
                if run_id
                else c.FinishSession(
                    session_id=session_id,
                    requested="failed",
                    error="no controller within the grace",
                )
            )
        elif state != S.STARTING and age > graces.transition_s:
            command = {
                S.FINISHING: c.FinishSession,
                S.STOPPING: c.StopSession,
                S.CANCELLING: c.CancelSession,
            }[S(state)](session_id=session_id)
        if command is not None:
            try:
                engine.handle(command)
            except EngineError as ex:
                log.info("timeout of session %s not recorded: %s", session_id, ex)


def _cut_off_job(engine: DomainEngine, job_id: str) -> CommandResult | None:
    """Record a job's run cut off; returns the commit, if one was made."""
    state = queries.job_state(engine.log.connection(), job_id)
    if state == J.CANCELLING:
        return engine.handle(c.ConfirmJobCancelled(job_id=job_id))
    if state == J.RUNNING:
        return engine.handle(pausing.SuspendJob(job_id=job_id, reason=RUN_CUT_OFF))
    row = queries.run_process(engine.log.connection(), job_id)
    if state == J.PAUSED and row is not None and row.pause == PAUSE_COLD:
        # A cold pause's intent is in the log: its run is gone, so the pause is done.
        return engine.handle(pausing.RetireJob(job_id=job_id, reason="cold pause: run cut off"))
    if state == J.PAUSED:  # its process is gone: cut off too, but left for a continue
        return engine.handle(pausing.SuspendJob(job_id=job_id, reason=PAUSED_CUT_OFF))
    return None


def is_recovered(engine: DomainEngine) -> bool:
    """What another worker of the same instance waits for: no run of an older epoch left."""
    return queries.runs_before_epoch(engine.log.connection(), engine.log.epoch) == 0
