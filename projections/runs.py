"""Read model: the run ledger, runs started and not ended (design.md §6, §8).

A row appears when a job or a session controller starts a run and disappears when that run
ends for any reason; after a crash, the rows left are exactly the runs that were cut off. What
each event does to the ledger is written as SQL and in memory by ``projections.fold``.
"""

from __future__ import annotations

from typing import Any

from engine.domain.job import (
    JobCancelled,
    JobFinished,
    JobRetired,
    JobStarted,
    JobSuperseded,
    JobSuspended,
)
from engine.domain.session import (
    SessionCancelled,
    SessionFinished,
    SessionPaused,
    SessionResumed,
    SessionStarted,
    SessionStopped,
    SessionSuspended,
)
from engine.events import Event, RecordedEvent
from projections.changes import Fold, Shape, deletes
from projections.fold import FoldedProjection

# A start sets every column; a job's starts are as many as its runs.
_RUN = Shape("run_id", "pid", "start_token", "epoch", "started_at")


@_RUN.puts
def job_started(e: RecordedEvent, job: str) -> tuple[Any, ...]:
    ev: Any = e.event
    return "job", job, ev.run_id, ev.pid, ev.start_token, e.epoch, e.recorded_at


@deletes
def job_run_ended(e: RecordedEvent, job: str) -> tuple[Any, ...]:
    # A cancelling job's process still runs until its runner confirms the cancel, and a
    # paused one is stopped (or, cold, finalizing), not gone: both keep their run until a
    # cancel is confirmed or the cold pause's run is retired.
    return "job", job


@_RUN.puts
def session_started(e: RecordedEvent, session: str) -> tuple[Any, ...] | None:
    ev: Any = e.event
    if ev.pid <= 0:  # sessions without a controller run nothing
        return None
    return "session", session, ev.run_id, ev.pid, ev.start_token, e.epoch, e.recorded_at


@deletes
def session_run_ended(e: RecordedEvent, session: str) -> tuple[Any, ...]:
    return "session", session


@deletes
def session_finished(e: RecordedEvent, session: str) -> tuple[Any, ...] | None:
    if e.state == "detached":  # a detached session keeps its controller
        return None
    return "session", session


FOLDS: dict[type[Event], Fold] = {
    JobStarted: job_started,
    JobFinished: job_run_ended,
    JobSuperseded: job_run_ended,
    JobSuspended: job_run_ended,
    JobCancelled: job_run_ended,
    JobRetired: job_run_ended,
    SessionStarted: session_started,
    SessionPaused: session_run_ended,
    SessionSuspended: session_run_ended,
    SessionResumed: session_run_ended,
    SessionStopped: session_run_ended,
    SessionCancelled: session_run_ended,
    SessionFinished: session_finished,
}


class RunsProjection(FoldedProjection):
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

    key = ("kind", "entity_id")
    folds = FOLDS
