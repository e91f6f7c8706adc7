"""Session-wide relaunch and graceful stop (design.md §5.5), over the runtime.

- ``continue_paused``: after a session's continue, each job its pause paused goes on: a live
  (stopped) process is continued; one whose process is gone gets a new run
  (``FOLDLINE_RESUMED=1``), re-admitted like new work by the start rule.
- ``stop_gracefully``: the session is recorded ``stopping`` (it admits nothing new), each live
  job's process group gets SIGTERM, the jobs have ``FOLDLINE_STOP_GRACE_S`` to finish on their
  own (waited for on the log, not slept), then whatever is left is cancelled and the session
  ends ``stopped`` in one transaction.
"""

from __future__ import annotations

import signal
import time

from adapters.services.runtime import Runtime
from adapters.system.processes import is_alive, kill_group
from engine.domain import commands as c
from engine.domain.job import JobState as J
from engine.domain.rows import JobRow
from engine.errors import EngineError
from projections import queries


def process_gone(record: JobRow) -> bool:
    return not is_alive(record.pid or 0, record.start_token or "")


def relaunchable(record: JobRow) -> bool:
    """Suspended, or paused with its process gone (a cold pause): continue starts a new run."""
    return record.state == J.SUSPENDED or (record.state == J.PAUSED and process_gone(record))


def continue_paused(runtime: Runtime, session_id: str) -> list[str]:
    """Continue the jobs the session's pause paused; returns their ids. A job that cannot
    be re-admitted now stays paused (its refusal is logged, the others go on)."""
    continued = []
    conn = runtime.engine.log.connection()
    for record in queries.live_processes(conn, session_id):
        if record.state != J.PAUSED or record.paused_by != "session":
            continue
        try:
            if process_gone(record):
                runtime.jobs.resume(record.job_id)
            else:
                runtime.engine.handle(c.ContinueJob(job_id=record.job_id))
        except EngineError:
            continue
        continued.append(record.job_id)
    return continued


def stop_gracefully(runtime: Runtime, session_id: str, reason: str) -> None:
    """SIGTERM, ``stop_grace_s`` to finish, then cancel what is left; ends ``stopped``."""
    engine = runtime.engine
    engine.handle(c.StopSession(session_id=session_id, reason=reason, wait=True))
    log = engine.log
    for record in queries.live_processes(log.connection(), session_id):
        if record.state == J.RUNNING and not process_gone(record):
            kill_group(record.pid or 0, signal.SIGTERM)
    deadline = time.monotonic() + runtime.config.stop_grace_s
    while not runtime.shutdown.is_set():
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
