"""Read model: the run ledger, runs started and not ended (SPEC §6, §8).

A row appears when a job or a session controller starts a run and disappears when that run
ends for any reason; after a crash, the rows left are exactly the runs that were cut off.
"""

from __future__ import annotations

from typing import Any

from engine.domain import ids
from engine.domain.job import JobCancelled, JobFinished, JobStarted, JobSuperseded, JobSuspended
from engine.domain.session import (
    SessionCancelled,
    SessionFinished,
    SessionPaused,
    SessionResumed,
    SessionStarted,
    SessionStopped,
    SessionSuspended,
)
from engine.events import RecordedEvent
from engine.projection import DispatchProjection, Folder, handles
from projections import memory


class RunsProjection(DispatchProjection):
    name = "runs"
    version = 2  # 2: session runs only for a controller process
    tables = ("runs",)
    folds_by_entity = True  # every row from its own entity's streams
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
        return ids.entity_of(e.stream_id)

    def memory_folder(self, cursor: Any) -> Folder:
        return memory.runs_folder(cursor)

    def _start(self, cur: Any, kind: str, e: RecordedEvent) -> None:
        ev: Any = e.event
        cur.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
            (kind, self._id(e), ev.run_id, ev.pid, ev.start_token, e.epoch, e.recorded_at),
        )

    def _end(self, cur: Any, kind: str, e: RecordedEvent) -> None:
        cur.execute("DELETE FROM runs WHERE kind = ? AND entity_id = ?", (kind, self._id(e)))

    @handles(JobStarted)
    def on_job_started(self, cur: Any, e: RecordedEvent) -> None:
        self._start(cur, "job", e)

    # A cancelling job's process still runs until its runner confirms the cancel, and a
    # paused one is stopped, not gone: both keep their run.
    @handles(JobFinished, JobSuperseded, JobSuspended, JobCancelled)
    def _job_run_ended(self, cur: Any, e: RecordedEvent) -> None:
        self._end(cur, "job", e)

    @handles(SessionStarted)
    def on_session_started(self, cur: Any, e: RecordedEvent) -> None:
        if e.event.pid > 0:  # type: ignore[attr-defined]  # sessions without a controller run nothing
            self._start(cur, "session", e)

    @handles(SessionPaused, SessionSuspended, SessionResumed, SessionStopped, SessionCancelled)
    def _session_run_ended(self, cur: Any, e: RecordedEvent) -> None:
        self._end(cur, "session", e)

    @handles(SessionFinished)
    def on_session_finished(self, cur: Any, e: RecordedEvent) -> None:
        if e.state != "detached":  # a detached session keeps its controller
            self._end(cur, "session", e)
