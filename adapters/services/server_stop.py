"""The server's own graceful stop, for the runs one gunicorn worker owns (ADR 0058).

SIGTERM to the server reaches each worker, and each winds down the runs it owns (only a run's
owner holds its process): a run that takes input is sent a ``finalize`` control, any other
SIGTERM (``job.signalled``, recorded before it is sent: ``winddown.ask_to_end``); then the
runs have the server's stop grace (``FOLDLINE_SERVER_STOP_GRACE_S``) to end on their own,
waited for on the log and on the runs' threads, never slept. A run that ends within it records
its end as always (``ok`` with its answer, or ``error``). What lingers is then cancelled, as a
session's graceful stop cancels it (issue 43, goal 5): the runs still working or paused, and
those the SIGTERM killed meanwhile, each ``job.cancelled`` with the stop's reason, its group
killed, then confirmed. With ``FOLDLINE_SERVER_STOP_LINGERING=cut_off`` (a redeploy that must
not drop owed work) what lingers is cut off instead, as is a run the stop could not record (the
lease lost, the log gone): it stays ``running`` and the next server's recovery resumes it, as
after a ``kill -9``.

Runs started during the grace (a request in flight at the SIGTERM) are asked too. A paused
run is not asked (it cannot answer while stopped): it is cancelled at the end. The wait is
bounded by the grace and ``CONFIRM_WITHIN_S`` whatever the runs do, and ends at once when the
lease is lost (nothing more can be recorded) or no owned run is left.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

from adapters.services.winddown import ask_to_end, process_gone
from adapters.settings.config import ServerConfig
from adapters.system.processes import kill_group
from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.domain.job import JobState as J
from engine.errors import EngineError
from projections import queries

log = logging.getLogger("foldline.server_stop")

# The job states of an owned run that the stop waits for: one still working, or being
# cancelled (its confirmation is a moment away).
WAITED = frozenset({J.RUNNING, J.CANCELLING})
# How often the wait looks again at most, when no commit wakes it (a cut-off run's thread
# ends without one).
LOOK_EVERY_S = 0.25
# The job states the stop cancels at the end: a run still working, or a paused one.
LINGERING = frozenset({J.RUNNING, J.PAUSED})
# How long a cancelled run's owner has to confirm it, once its group is killed, before the
# stop confirms it itself (within gunicorn's margin after the grace).
CONFIRM_WITHIN_S = 2.0


class ServerStop:
    """One process's part of the server's graceful stop. ``began``: its runs are being asked
    to end (a run killed by a signal now records nothing: the stop cancels it); ``stopping``
    (the server's) follows once they ended or were cancelled, which ends long waits and
    streams."""

    def __init__(
        self, config: ServerConfig, stopping: threading.Event, began: threading.Event
    ) -> None:
        self.grace_s = config.server_stop_grace_s
        self.cancels = config.server_stop_lingering == "cancel"
        self.began = began
        self._stopping = stopping
        self._thread: threading.Thread | None = None

    def begin(
        self,
        engine: Callable[[], DomainEngine | None],
        owned: Callable[[], list[str]],
        lost: threading.Event,
    ) -> None:
        """Wind down ``owned()`` in a thread of its own (``wind_down_runs``, then
        ``cancel_lingering``), then set ``stopping``; ``engine()`` is None in a process that
        never opened the log (it owns no run). Requests in flight go on meanwhile, so a
        caller waiting for a run that finalizes gets its answer. Once per process; returns at
        once (it runs in a signal handler)."""
        if self.began.is_set():
            return
        self.began.set()

        def wind_down() -> None:
            try:
                opened = engine()
                if opened is not None and owned():
                    seen = wind_down_runs(opened, owned, self.grace_s, lost)
                    left = lingering(opened, seen)
                    if self.cancels and left and not lost.is_set():
                        cancel_lingering(opened, left, self.grace_s)
                    elif left:
                        log.warning("the server stops: cut off, for recovery: %s", ", ".join(left))
            except Exception:  # the stop goes on: what is left is cut off, for recovery
                log.exception("the runs of this process were not wound down")
            finally:
                self._stopping.set()

        self._thread = threading.Thread(target=wind_down, name="server-stop", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for a wind-down under way (at most its grace, the confirmations and a
        second)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.grace_s + CONFIRM_WITHIN_S + 1)


def wind_down_runs(
    engine: DomainEngine,
    owned: Callable[[], list[str]],
    grace_s: float,
    lost: threading.Event,
) -> list[str]:
    """Ask each run of ``owned()`` (this process's runs, by job id) to end, and wait up to
    ``grace_s`` for them to end; returns the job ids of every run it saw (the caller cancels
    those that did not end). ``lost``: the lease is lost, nothing more is asked or waited
    for.

    Never raises for a run: a refusal to ask one is logged (``ask_to_end``).
    """
    deadline = time.monotonic() + grace_s
    asked: set[str] = set()
    seen: list[str] = []
    while True:
        if lost.is_set():
            return seen
        head = engine.log.head()
        working = []
        conn = engine.log.connection()
        for job_id in owned():
            if job_id not in seen:
                seen.append(job_id)
            row = queries.run_process(conn, job_id)
            if row is None or row.state not in WAITED:
                continue
            working.append(job_id)
            if job_id not in asked and row.state == J.RUNNING and not process_gone(row):
                asked.add(job_id)
                ask_to_end(engine, row, "graceful stop of the server")
        left = deadline - time.monotonic()
        if not working or left <= 0:
            return seen
        engine.log.wait_for(head, min(LOOK_EVERY_S, left))


def lingering(engine: DomainEngine, job_ids: list[str]) -> list[str]:
    """Those of ``job_ids`` still running or paused: what the grace left."""
    conn = engine.log.connection()
    return [j for j in job_ids if queries.job_state(conn, j) in LINGERING]


def cancel_lingering(engine: DomainEngine, job_ids: list[str], grace_s: float) -> list[str]:
    """Cancel each of ``job_ids`` still running or paused (a run that ignored the stop, or one
    its SIGTERM killed, whose owner recorded nothing): ``job.cancelled`` with the stop's
    reason, SIGKILL to its group, then its owner's confirmation, waited for on the log up to
    ``CONFIRM_WITHIN_S``, or the stop's own. Returns the ids it cancelled."""
    reason = f"graceful stop of the server: the grace of {grace_s:g} s ended"
    cancelled = []
    for job_id in job_ids:
        row = queries.run_process(engine.log.connection(), job_id)
        if row is None or row.state not in LINGERING:
            continue
        try:
            engine.handle(c.CancelJob(job_id=job_id, reason=reason))
        except EngineError as ex:  # it ended meanwhile: nothing lingers
            log.info("job %s not cancelled by the stop: %s", job_id, ex)
            continue
        kill_group(row.pid or 0, signal.SIGKILL)
        cancelled.append(job_id)
    if cancelled:
        log.warning(
            "the server stops: %d run(s) left after the grace of %g s are cancelled: %s",
            len(cancelled),
            grace_s,
            ", ".join(cancelled),
        )
    _confirm(engine, cancelled)
    return cancelled


def _confirm(engine: DomainEngine, job_ids: list[str]) -> None:
    """Wait for the owners of ``job_ids`` to confirm their cancel (their threads see the group
    end), then confirm those still ``cancelling`` (their thread had ended already)."""
    deadline = time.monotonic() + CONFIRM_WITHIN_S
    while True:
        head = engine.log.head()
        conn = engine.log.connection()
        waiting = [j for j in job_ids if queries.job_state(conn, j) == J.CANCELLING]
        left = deadline - time.monotonic()
        if not waiting or left <= 0:
            break
        engine.log.wait_for(head, min(LOOK_EVERY_S, left))
    for job_id in waiting:
        try:
            engine.handle(c.ConfirmJobCancelled(job_id=job_id))
        except EngineError as ex:  # its owner confirmed it a moment ago
            log.info("cancel of %s confirmed elsewhere: %s", job_id, ex)
