"""Read model: every session, its state, controller, reply pointer and taint, and what each
session event does to its row (written as SQL and in memory by ``projections.fold``)."""

from __future__ import annotations

from typing import Any

from engine.domain.retention import EntityRetired
from engine.domain.session import (
    SessionAttached,
    SessionCancelled,
    SessionCancelling,
    SessionCreated,
    SessionDetached,
    SessionFinished,
    SessionFinishing,
    SessionOwes,
    SessionPaused,
    SessionResumed,
    SessionSettled,
    SessionStarted,
    SessionStopped,
    SessionStopping,
    SessionSuspended,
    SessionTainted,
)
from engine.events import Event, RecordedEvent
from projections.changes import Appended, Change, Fold, Update, insert, update
from projections.fold import FoldedProjection
from projections.retired import retires

_ENDS = ("completed", "failed", "stopped", "cancelled")


def _moved(e: RecordedEvent, session: str, **fields: Any) -> Update:
    """Every session event moves state, version and updated_at (and finished_at into an end);
    some set more columns."""
    if e.state in _ENDS:
        fields["finished_at"] = e.recorded_at
    return update(session, state=e.state, version=e.version, updated_at=e.recorded_at, **fields)


def created(e: RecordedEvent, session: str) -> Change:
    ev: Any = e.event
    return insert(
        session,
        state=e.state,
        version=e.version,
        agent=ev.agent,
        origin=ev.origin,
        resource_group=ev.resource_group,
        units=ev.units,
        has_controller=int(ev.has_controller),
        created_at=e.recorded_at,
        updated_at=e.recorded_at,
    )


def started(e: RecordedEvent, session: str) -> Change:
    ev: Any = e.event
    return _moved(e, session, run_id=ev.run_id, pid=ev.pid, start_token=ev.start_token)


def detached(e: RecordedEvent, session: str) -> Change:
    return _moved(e, session, detached_by=e.event.by)  # type: ignore[attr-defined]


def attached(e: RecordedEvent, session: str) -> Change:
    return _moved(e, session, detached_by=None)


def controller_gone(e: RecordedEvent, session: str) -> Change:
    """Paused or suspended: its controller is no longer running."""
    return _moved(e, session, pid=None, start_token=None)


def resumed(e: RecordedEvent, session: str) -> Change:
    run_id = e.event.run_id or None  # type: ignore[attr-defined]
    extra = {"run_id": run_id} if run_id else {}
    return _moved(e, session, pid=None, start_token=None, detached_by=None, **extra)


def finishing(e: RecordedEvent, session: str) -> Change:
    ev: Any = e.event
    return _moved(e, session, requested=ev.requested, error=ev.error or None)


def finished(e: RecordedEvent, session: str) -> Change:
    extra = {"detached_by": None} if e.state == "detached" else {}
    return _moved(e, session, requested=None, **extra)


def tainted(e: RecordedEvent, session: str) -> Change:
    return _moved(e, session, tainted=1, taint_reasons=Appended(e.event.reason))  # type: ignore[attr-defined]


def owes(e: RecordedEvent, session: str) -> Change:
    owed: Any = e.event.owed  # type: ignore[attr-defined]
    return _moved(e, session, owes_kind=owed.kind, owes_ref=owed.ref)


def settled(e: RecordedEvent, session: str) -> Change:
    return _moved(e, session, owes_kind=None, owes_ref=None)


FOLDS: dict[type[Event], Fold] = {
    EntityRetired: retires("session"),  # a retention policy retired the ended session's row
    SessionCreated: created,
    SessionStarted: started,
    SessionDetached: detached,
    SessionAttached: attached,
    SessionPaused: controller_gone,
    SessionSuspended: controller_gone,
    SessionResumed: resumed,
    SessionFinishing: finishing,
    SessionFinished: finished,
    SessionStopping: _moved,
    SessionStopped: _moved,
    SessionCancelling: _moved,
    SessionCancelled: _moved,
    SessionTainted: tainted,
    SessionOwes: owes,
    SessionSettled: settled,
}


class SessionsProjection(FoldedProjection):
    name = "sessions"
    version = 1
    tables = ("sessions",)
    folds_by_entity = True  # every row from its own entity's streams
    ddl = """
        CREATE TABLE sessions (
            session_id     TEXT    PRIMARY KEY,
            state          TEXT    NOT NULL,
            version        INTEGER NOT NULL,
            agent          TEXT    NOT NULL,
            origin         TEXT    NOT NULL,
            resource_group TEXT,
            units          INTEGER NOT NULL,
            has_controller INTEGER NOT NULL,
            run_id         TEXT,
            pid            INTEGER,
            start_token    TEXT,
            tainted        INTEGER NOT NULL DEFAULT 0,
            taint_reasons  TEXT    NOT NULL DEFAULT '[]',
            owes_kind      TEXT,
            owes_ref       TEXT,
            detached_by    TEXT,
            requested      TEXT,
            error          TEXT,
            created_at     TEXT    NOT NULL,
            updated_at     TEXT    NOT NULL,
            finished_at    TEXT
        ) WITHOUT ROWID;
        CREATE INDEX sessions_by_state ON sessions (state, updated_at);
        CREATE INDEX sessions_by_group ON sessions (resource_group, state);
        CREATE INDEX sessions_by_update ON sessions (updated_at);
    """

    key = ("session_id",)
    folds = FOLDS
