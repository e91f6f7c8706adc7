"""Read model: the run ledger, runs started and not ended (SPEC §6, §8).

A row appears when a job or a session controller starts a run and disappears when that run
ends for any reason; after a crash, the rows left are exactly the runs that were cut off.
"""

from __future__ import annotations

from typing import Any

from engine.events import RecordedEvent
from engine.projection import DispatchProjection


class RunsProjection(DispatchProjection):
    name = "runs"
    version = 2  # 2: session runs only for a controller process
    tables = ("runs",)
    ddl = """
        CREATE TABLE runs (
            kind        TEXT    NOT NULL,
            entity_id   TEXT    NOT NULL,
            run_id      TEXT    NOT NULL,
            pid         INTEGER NOT NULL,
            start_token TEXT    NOT NULL,
            epoch       INTEGER NOT NULL,
            started_at  TEXT    NOT NULL,
            PRIMARY KEY (kind, entity_id)
        ) WITHOUT ROWID;
    """

    @staticmethod
    def _id(e: RecordedEvent) -> str:
        return e.stream_id.partition(":")[2]

    def _start(self, cur: Any, kind: str, e: RecordedEvent) -> None:
        ev: Any = e.event
        cur.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
            (kind, self._id(e), ev.run_id, ev.pid, ev.start_token, e.epoch, e.recorded_at),
        )

    def _end(self, cur: Any, kind: str, e: RecordedEvent) -> None:
        cur.execute("DELETE FROM runs WHERE kind = ? AND entity_id = ?", (kind, self._id(e)))

    def on_job_started(self, cur: Any, e: RecordedEvent) -> None:
        self._start(cur, "job", e)

    def _job_run_ended(self, cur: Any, e: RecordedEvent) -> None:
        self._end(cur, "job", e)

    # A cancelling job's process still runs until its runner confirms the cancel, and a
    # paused one is stopped, not gone: both keep their run.
    on_job_finished = _job_run_ended
    on_job_superseded = _job_run_ended
    on_job_suspended = _job_run_ended
    on_job_cancelled = _job_run_ended

    def on_session_started(self, cur: Any, e: RecordedEvent) -> None:
        if e.event.pid > 0:  # type: ignore[attr-defined]  # sessions without a controller run nothing
            self._start(cur, "session", e)

    def _session_run_ended(self, cur: Any, e: RecordedEvent) -> None:
        self._end(cur, "session", e)

    on_session_paused = _session_run_ended
    on_session_suspended = _session_run_ended
    on_session_resumed = _session_run_ended
    on_session_stopped = _session_run_ended
    on_session_cancelled = _session_run_ended

    def on_session_finished(self, cur: Any, e: RecordedEvent) -> None:
        if e.state != "detached":  # a detached session keeps its controller
            self._end(cur, "session", e)
