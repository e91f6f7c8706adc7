"""A run's pauses and its loss, for the run's owner (``adapters.services.run``, ADR 0058).

- ``RunPause.follow``, every tick: a live pause stops the run's group (SIGSTOP) and a continue
  lets it go on (SIGCONT); a cold pause lets a stopped group go on so it can end, sends SIGTERM
  to a run that takes no input (one that does has its ``finalize`` control on its way), and
  ``is_past_grace`` says when its group is to be killed.
- ``end_while_paused``, once the process is gone: a cold pause's run is retired (the job stays
  paused, holding nothing); a live-paused run, or one killed by a signal nobody here sent, is
  lost (the job is suspended, its output kept, for a continue).
"""

from __future__ import annotations

import signal
import time

from adapters.system.processes import kill_group
from engine.domain import commands as c
from engine.domain import pausing
from engine.domain.engine import DomainEngine
from engine.domain.job import PAUSE_COLD
from engine.domain.job import JobState as J
from engine.engine import CommandResult
from projections import queries

RETIRED = "retired"  # why a run was killed: its cold pause's grace ended


class RunPause:
    """What the run's owner does about its job's pause, tick by tick."""

    def __init__(self, engine: DomainEngine, job_id: str, run_id: str, pid: int) -> None:
        self._engine, self._job_id, self._run_id, self._pid = engine, job_id, run_id, pid
        self._frozen = False
        self._retire_by: float | None = None  # a cold pause: when the group is killed

    def follow(self, state: str | None, input_closed: bool) -> None:
        """Act on the job's ``state`` as read this tick; ``input_closed``: the run takes no
        (more) input, so a cold pause asks it to end by SIGTERM."""
        grace = self._cold_grace() if state == J.PAUSED else None
        if grace is not None and self._retire_by is None:
            self._retire_by = time.monotonic() + grace
            if self._frozen:
                kill_group(self._pid, signal.SIGCONT)
                self._frozen = False
            if input_closed:
                kill_group(self._pid, signal.SIGTERM)
        elif self._retire_by is None and (state == J.PAUSED) != self._frozen:
            self._frozen = state == J.PAUSED  # a live pause's group is stopped, not killed
            kill_group(self._pid, signal.SIGSTOP if self._frozen else signal.SIGCONT)

    def end(
        self, exit_code: int, last_output: str, stopped_because: str | None
    ) -> CommandResult | None:
        """``end_while_paused`` for this run."""
        args = (self._job_id, self._run_id, exit_code, last_output, stopped_because)
        return end_while_paused(self._engine, *args)

    def is_past_grace(self) -> bool:
        return self._retire_by is not None and time.monotonic() > self._retire_by

    def _cold_grace(self) -> int | None:
        row = queries.run_process(self._engine.log.connection(), self._job_id)
        if row is None or row.pause != PAUSE_COLD:
            return None
        return row.pause_grace_s or 0


def end_while_paused(
    engine: DomainEngine,
    job_id: str,
    run_id: str,
    exit_code: int,
    last_output: str,
    stopped_because: str | None,
) -> CommandResult | None:
    """Record a run that ended while its job was paused, or by a signal nobody here sent, with
    its last output in the same commit (see the module). Returns the commit, or None if the
    run ended otherwise (a finish, a cancel, a timeout: the caller records it).

    Raises:
        EngineError: the job moved on meanwhile.
    """
    state = queries.job_state(engine.log.connection(), job_id)
    row = queries.run_process(engine.log.connection(), job_id)
    pause = row.pause if row is not None and state == J.PAUSED else None
    end: c.Command
    if stopped_because == RETIRED or pause == PAUSE_COLD:
        how = "killed after its grace" if stopped_because == RETIRED else "ended"
        end = pausing.RetireJob(
            job_id=job_id,
            run_id=run_id,
            reason=f"cold pause: its run {how} (exit code {exit_code})",
            exit_code=exit_code,
        )
    elif state == J.PAUSED or (exit_code < 0 and stopped_because is None):
        end = pausing.SuspendJob(
            job_id=job_id,
            run_id=run_id,
            reason=f"run lost: {how_it_ended(exit_code)}"
            + (" while paused" if state == J.PAUSED else ""),
            exit_code=exit_code,
        )
    else:
        return None
    if not last_output:
        return engine.handle(end)
    output = c.RecordJobOutput(job_id=job_id, text=last_output)
    return engine.handle_all([output, end])[-1]


def how_it_ended(exit_code: int) -> str:
    """``killed by SIGKILL`` for a negative exit code (Popen's signal), else the exit code."""
    if exit_code >= 0:
        return f"exit code {exit_code}"
    try:
        return f"killed by {signal.Signals(-exit_code).name}"
    except ValueError:
        return f"killed by signal {-exit_code}"
