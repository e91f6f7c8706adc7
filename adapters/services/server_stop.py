"""The server's own graceful stop, for the runs one gunicorn worker owns (ADR 0058).

SIGTERM to the server reaches each worker, and each winds down the runs it owns (only a run's
owner holds its process): a run that takes input is sent a ``finalize`` control, any other
SIGTERM (``job.signalled``, recorded before it is sent: ``winddown.ask_to_end``); then the
runs have the server's stop grace (``FOLDLINE_SERVER_STOP_GRACE_S``) to end on their own,
waited for on the log and on the runs' threads, never slept. A run that ends within it records
its end as always (``ok`` with its answer, or ``error``); one killed by a signal meanwhile is
cut off, as is what lingers once the grace is over: the caller then sets the server's
``stopping``, each run left is killed and records nothing, and the next server's recovery
resumes the jobs owed to a caller (their workers wait suspended). A stop is not a decision to
drop work: only a session's stop or cancel is.

Runs started during the grace (a request in flight at the SIGTERM) are asked too. A paused
run is not asked (it cannot answer while stopped): it is cut off at the end. The wait is
bounded by the grace whatever the runs do, and ends at once when the lease is lost (nothing
more can be recorded) or no owned run is left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from adapters.services.winddown import ask_to_end, process_gone
from adapters.settings.config import ServerConfig
from engine.domain.engine import DomainEngine
from engine.domain.job import JobState as J
from projections import queries

log = logging.getLogger("foldline.server_stop")

# The job states of an owned run that the stop waits for: one still working, or being
# cancelled (its confirmation is a moment away).
WAITED = frozenset({J.RUNNING, J.CANCELLING})
# How often the wait looks again at most, when no commit wakes it (a cut-off run's thread
# ends without one).
LOOK_EVERY_S = 0.25


class ServerStop:
    """One process's part of the server's graceful stop. ``began``: its runs are being asked
    to end (a run killed by a signal now is cut off); ``stopping`` (the server's) follows once
    they ended or the grace is over, which cuts off what is left and ends long waits and
    streams."""

    def __init__(
        self, config: ServerConfig, stopping: threading.Event, began: threading.Event
    ) -> None:
        self.grace_s = config.server_stop_grace_s
        self.began = began
        self._stopping = stopping
        self._thread: threading.Thread | None = None

    def begin(
        self,
        engine: Callable[[], DomainEngine | None],
        owned: Callable[[], list[str]],
        lost: threading.Event,
    ) -> None:
        """Wind down ``owned()`` in a thread of its own (``wind_down_runs``), then set
        ``stopping``; ``engine()`` is None in a process that never opened the log (it owns no
        run). Requests in flight go on meanwhile, so a caller waiting for a run that finalizes
        gets its answer. Once per process; returns at once (it runs in a signal handler)."""
        if self.began.is_set():
            return
        self.began.set()

        def wind_down() -> None:
            try:
                opened = engine()
                if opened is not None and owned():
                    wind_down_runs(opened, owned, self.grace_s, lost)
            except Exception:  # the stop goes on: what is left is cut off, for recovery
                log.exception("the runs of this process were not wound down")
            finally:
                self._stopping.set()

        self._thread = threading.Thread(target=wind_down, name="server-stop", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for a wind-down under way (at most its grace and a second)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.grace_s + 1)


def wind_down_runs(
    engine: DomainEngine,
    owned: Callable[[], list[str]],
    grace_s: float,
    lost: threading.Event,
) -> list[str]:
    """Ask each run of ``owned()`` (this process's runs, by job id) to end, and wait up to
    ``grace_s`` for them to end; returns the job ids of the runs still working when the wait
    ended (the caller cuts them off). ``lost``: the lease is lost, nothing more is asked or
    waited for.

    Never raises for a run: a refusal to ask one is logged (``ask_to_end``).
    """
    deadline = time.monotonic() + grace_s
    asked: set[str] = set()
    while True:
        if lost.is_set():
            return owned()
        head = engine.log.head()
        working = []
        conn = engine.log.connection()
        for job_id in owned():
            row = queries.run_process(conn, job_id)
            if row is None or row.state not in WAITED:
                continue
            working.append(job_id)
            if job_id not in asked and row.state == J.RUNNING and not process_gone(row):
                asked.add(job_id)
                ask_to_end(engine, row, "graceful stop of the server")
        left = deadline - time.monotonic()
        if not working or left <= 0:
            if working:
                log.warning(
                    "the server stops: %d run(s) still working after the grace of %g s are "
                    "cut off, for recovery: %s",
                    len(working),
                    grace_s,
                    ", ".join(working),
                )
            return working
        engine.log.wait_for(head, min(LOOK_EVERY_S, left))
