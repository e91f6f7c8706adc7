"""Session wind-down and relaunch (design.md §5.5): the session controls that take more than
one step, and a cold job's continue.

- ``control_session``: one session control. A stop without an expected version is the
  graceful stop; after a continue, the jobs its pause paused go on; after a stop or a cancel,
  the worktrees of its ended jobs go (their patches stay).
- ``continue_paused``: after a session's continue, each job its pause paused goes on: a live
  (stopped) process is continued; one whose process is gone gets a new run
  (``FOLDLINE_RESUMED=1``), re-admitted like new work by the start rule.
- ``stop_gracefully``: the session is recorded ``stopping`` (it admits nothing new), each
  running job whose run takes input is sent a ``finalize`` control, each other one's group
  SIGTERM (``job.signalled``, recorded first); the jobs have the call's grace (0 to 3600 s,
  default ``FOLDLINE_STOP_GRACE_S``) to finish on their own (waited for on the log, not
  slept), then whatever is left is cancelled and the session ends ``stopped`` in one
  transaction (ADR 0058).
- ``relaunch``: continue of a suspended job, or of a cold-paused one whose run is gone
  (``is_relaunchable``): a new run with its earlier output, re-admitted like new work; a
  refusal at re-admission is recorded (``job.continue_refused``) and raised.

The caller holds the workspace lease before any of these writes.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

from adapters.services.dispatch import Dispatcher
from adapters.services.job_controls import Controller
from adapters.system.processes import is_alive, kill_group
from engine.domain import channel as ch
from engine.domain import commands as c
from engine.domain import pausing
from engine.domain.channel import INPUT_LINES
from engine.domain.engine import DomainEngine
from engine.domain.errors import AdmissionRejected
from engine.domain.job import PAUSE_COLD, PAUSE_RETIRED, TERMINAL
from engine.domain.job import JobState as J
from engine.domain.rows import JobRow
from engine.errors import EngineError
from projections import queries

log = logging.getLogger("foldline.winddown")


def process_gone(record: JobRow) -> bool:
    return not is_alive(record.pid or 0, record.start_token or "")


def relaunchable(record: JobRow) -> bool:
    """Suspended, or paused with its run retired (a cold pause) or otherwise gone: continue
    starts a new run. A cold pause still ending is not (its continue is refused, 409)."""
    if record.state == J.SUSPENDED or record.pause == PAUSE_RETIRED:
        return record.state in (J.SUSPENDED, J.PAUSED)
    return record.state == J.PAUSED and record.pause != PAUSE_COLD and process_gone(record)


def record_refusal(engine: DomainEngine, job_id: str, ex: EngineError, by: str) -> None:
    """Put a continue's refusal at re-admission in the log (``job.continue_refused``), so it
    is never only an HTTP answer or a log line; other refusals changed nothing to record."""
    if not isinstance(ex, AdmissionRejected):
        return
    try:
        engine.handle(pausing.RefuseContinue(job_id=job_id, reason=ex.message[:1000], by=by))
    except EngineError as moved:  # it moved on meanwhile (cancelled): nothing to add
        log.info("refused continue of %s not recorded: %s", job_id, moved)


def ask_to_end(engine: DomainEngine, record: JobRow, reason: str) -> None:
    """Ask a running job's run to end, each step recorded before it is taken: a run that
    takes input gets a ``finalize`` control (its watcher writes it into the run), any other
    SIGTERM to its group (``job.signalled``). A refusal (the job moved on) is logged."""
    try:
        if record.input == INPUT_LINES:
            engine.handle(ch.SendControl(job_id=record.job_id, action="finalize", by="stop"))
            return
        engine.handle(pausing.SignalJob(job_id=record.job_id, signal="SIGTERM", reason=reason))
    except EngineError as ex:
        log.info("job %s not asked to end: %s", record.job_id, ex)
        return
    kill_group(record.pid or 0, signal.SIGTERM)


class Winddown:
    """The wind-down of sessions over this process's engine; new runs start through
    ``jobs``. ``stopping``: the server stops (a graceful stop waits no longer)."""

    def __init__(
        self,
        engine: Callable[[], DomainEngine],
        jobs: Dispatcher,
        stop_grace_s: float,
        stopping: threading.Event,
    ) -> None:
        self._engine = engine
        self._jobs = jobs
        self._stop_grace_s = stop_grace_s
        self._stopping = stopping

    def control_session(self, command: c.Command, grace_s: float | None = None) -> None:
        """Record one session control (see the module) and do what follows it; ``grace_s``:
        a graceful stop's grace (None: the server's ``stop_grace_s``).

        Raises:
            EngineError: the rules refused it (nothing recorded).
        """
        if isinstance(command, c.StopSession) and command.expected_version is None:
            grace = self._stop_grace_s if grace_s is None else grace_s
            self.stop_gracefully(command.session_id, command.reason or "session stopped", grace)
        else:
            self._engine().handle(command)
        if isinstance(command, c.AttachSession):
            self.continue_paused(command.session_id)
        if isinstance(command, (c.StopSession, c.CancelSession)):
            self.sweep_worktrees()

    def continue_paused(self, session_id: str) -> list[str]:
        """Continue the jobs the session's pause paused; returns their ids. A job that cannot
        be re-admitted now stays paused (its refusal is logged, the others go on)."""
        continued = []
        engine = self._engine()
        for record in queries.live_processes(engine.log.connection(), session_id):
            # Paused by it, or suspended since (its run was lost while paused): both go on.
            if record.state not in (J.PAUSED, J.SUSPENDED) or record.paused_by != "session":
                continue
            try:
                if relaunchable(record):  # the operator's continue: a control (ADR 0057)
                    self._jobs.resume(record.job_id, continued=Controller())
                else:
                    engine.handle(pausing.ContinueJob(job_id=record.job_id))
            except EngineError as ex:  # recorded, the others go on
                record_refusal(engine, record.job_id, ex, "session")
                continue
            continued.append(record.job_id)
        return continued

    def stop_gracefully(self, session_id: str, reason: str, grace_s: float) -> None:
        """Finalize or SIGTERM, ``grace_s`` to finish, then cancel what is left; ends
        ``stopped``."""
        engine = self._engine()
        engine.handle(c.StopSession(session_id=session_id, reason=reason, wait=True))
        log = engine.log
        for record in queries.live_processes(log.connection(), session_id):
            if record.state == J.RUNNING and not process_gone(record):
                ask_to_end(engine, record, f"graceful stop of session {session_id}")
        deadline = time.monotonic() + grace_s
        while not self._stopping.is_set():
            head = log.head()
            # By the log, not the process: a run whose process just exited is recorded by its
            # owner a moment later, and cancelling it meanwhile would lose its finish.
            running = [
                r
                for r in queries.live_processes(log.connection(), session_id)
                if r.state in (J.RUNNING, J.CANCELLING)
            ]
            left = deadline - time.monotonic()
            if not running or left <= 0:
                break
            log.wait_for(head, min(0.5, left))
        ended = f"{reason}: the graceful stop's grace of {grace_s:g} s ended"
        engine.handle(c.StopSession(session_id=session_id, reason=ended[:1000]))

    def is_relaunchable(self, job_id: str) -> bool:
        """Whether a continue of ``job_id`` starts a new run (``relaunchable``)."""
        record = queries.run_process(self._engine().log.connection(), job_id)
        return record is not None and relaunchable(record)

    def relaunch(self, job_id: str, extra_input: str, by: Controller) -> None:
        """Continue of a suspended job, or a cold-paused one whose run is gone: a new run with
        ``FOLDLINE_RESUMED=1`` and its earlier output (``extra_input`` appended to the
        prompt), re-admitted by the start rule like new work, in the write that checks
        ``by``'s grant and the control revision it expects (ADR 0057). A refusal at
        re-admission is recorded before it is raised.

        Raises:
            DispatchFailed: its run could not be started.
            EngineError: the rules refused the new run (only a refusal at re-admission is
                recorded, ``job.continue_refused``).
        """
        engine = self._engine()
        try:
            self._jobs.resume(job_id, extra_input, continued=by)
        except EngineError as ex:
            record_refusal(engine, job_id, ex, by.caller_job or "operator")
            raise

    def sweep_worktrees(self, unknown_too: bool = False) -> None:
        """Remove the worktrees of jobs that are over: after recovery, also those of jobs the
        log does not know (a launch cut off before it was recorded); after a session's stop or
        cancel only known ones, since a launch under way makes its worktree before its job is
        recorded. Their patches stay."""
        conn = self._engine().log.connection()

        def wanted(job_id: str) -> bool:
            state = queries.job_state(conn, job_id)
            return state not in TERMINAL if state is not None else not unknown_too

        self._jobs.worktrees.sweep(wanted)
