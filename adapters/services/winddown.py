"""Session wind-down and relaunch (design.md §5.5): the session controls that take more than
one step, and a cold job's continue.

- ``control_session``: one session control. A stop without an expected version is the
  graceful stop; after a continue, the jobs its pause paused go on; after a stop or a cancel,
  the worktrees of its ended jobs go (their patches stay).
- ``continue_paused``: after a session's continue, each job its pause paused goes on: a live
  (stopped) process is continued; one whose process is gone gets a new run
  (``FOLDLINE_RESUMED=1``), re-admitted like new work by the start rule.
- ``stop_gracefully``: the session is recorded ``stopping`` (it admits nothing new), each live
  job's process group gets SIGTERM, the jobs have ``FOLDLINE_STOP_GRACE_S`` to finish on their
  own (waited for on the log, not slept), then whatever is left is cancelled and the session
  ends ``stopped`` in one transaction.
- ``relaunch``: continue of a suspended job, or of a paused one whose process is gone
  (``is_relaunchable``): a new run, re-admitted like new work.

The caller holds the workspace lease before any of these writes.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

from adapters.services.dispatch import Dispatcher
from adapters.system.processes import is_alive, kill_group
from engine.domain import commands as c
from engine.domain import ids
from engine.domain.engine import DomainEngine
from engine.domain.job import TERMINAL
from engine.domain.job import JobState as J
from engine.domain.rows import JobRow
from engine.errors import ConcurrencyError, EngineError
from projections import queries


def process_gone(record: JobRow) -> bool:
    return not is_alive(record.pid or 0, record.start_token or "")


def relaunchable(record: JobRow) -> bool:
    """Suspended, or paused with its process gone (a cold pause): continue starts a new run."""
    return record.state == J.SUSPENDED or (record.state == J.PAUSED and process_gone(record))


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

    def control_session(self, command: c.Command) -> None:
        """Record one session control (see the module) and do what follows it.

        Raises:
            EngineError: the rules refused it (nothing recorded).
        """
        if isinstance(command, c.StopSession) and command.expected_version is None:
            self.stop_gracefully(command.session_id, command.reason or "session stopped")
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
            if record.state != J.PAUSED or record.paused_by != "session":
                continue
            try:
                if process_gone(record):
                    self._jobs.resume(record.job_id)
                else:
                    engine.handle(c.ContinueJob(job_id=record.job_id))
            except EngineError:
                continue
            continued.append(record.job_id)
        return continued

    def stop_gracefully(self, session_id: str, reason: str) -> None:
        """SIGTERM, ``stop_grace_s`` to finish, then cancel what is left; ends ``stopped``."""
        engine = self._engine()
        engine.handle(c.StopSession(session_id=session_id, reason=reason, wait=True))
        log = engine.log
        for record in queries.live_processes(log.connection(), session_id):
            if record.state == J.RUNNING and not process_gone(record):
                kill_group(record.pid or 0, signal.SIGTERM)
        deadline = time.monotonic() + self._stop_grace_s
        while not self._stopping.is_set():
            head = log.head()
            running = [
                r
                for r in queries.live_processes(log.connection(), session_id)
                if r.state in (J.RUNNING, J.CANCELLING) and not process_gone(r)
            ]
            left = deadline - time.monotonic()
            if not running or left <= 0:
                break
            log.wait_for(head, min(0.5, left))
        engine.handle(c.StopSession(session_id=session_id, reason=reason))

    def is_relaunchable(self, job_id: str) -> bool:
        """Whether a continue of ``job_id`` starts a new run (``relaunchable``)."""
        record = queries.run_process(self._engine().log.connection(), job_id)
        return record is not None and relaunchable(record)

    def relaunch(self, job_id: str, extra_input: str, expected_version: int | None) -> None:
        """Continue of a suspended job, or a paused one whose process is gone: a new run with
        ``FOLDLINE_RESUMED=1`` (``extra_input`` appended to the prompt), re-admitted by the
        start rule like new work.

        Raises:
            ConcurrencyError: the job is no longer at ``expected_version``.
            DispatchFailed: its run could not be started.
            EngineError: the rules refused the new run.
        """
        if expected_version is not None:
            job = queries.job(self._engine().log.connection(), job_id)
            if job is not None and job.version != expected_version:
                raise ConcurrencyError(ids.job(job_id), expected_version, job.version)
        self._jobs.resume(job_id, extra_input)

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
