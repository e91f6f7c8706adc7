"""Read model: every session, its state, controller, reply pointer and taint."""

from __future__ import annotations

import json
from typing import Any

from engine.domain import ids
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
from engine.events import RecordedEvent
from engine.projection import DispatchProjection, Folder, handles
from projections import memory


class SessionsProjection(DispatchProjection):
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

    @staticmethod
    def _id(e: RecordedEvent) -> str:
        return ids.entity_of(e.stream_id)

    def memory_folder(self, cursor: Any) -> Folder:
        return memory.sessions_folder(cursor)

    def _set(self, cur: Any, e: RecordedEvent, **fields: Any) -> None:
        """Every event moves state, version and updated_at; some set more columns."""
        columns = {"state": e.state, "version": e.version, "updated_at": e.recorded_at, **fields}
        if e.state in ("completed", "failed", "stopped", "cancelled"):
            columns["finished_at"] = e.recorded_at
        assignments = ", ".join(f"{name} = ?" for name in columns)
        cur.execute(
            f"UPDATE sessions SET {assignments} WHERE session_id = ?",
            (*columns.values(), self._id(e)),
        )

    @handles(SessionCreated)
    def on_session_created(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        cur.execute(
            "INSERT INTO sessions (session_id, state, version, agent, origin, resource_group,"
            " units, has_controller, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self._id(e),
                e.state,
                e.version,
                ev.agent,
                ev.origin,
                ev.resource_group,
                ev.units,
                int(ev.has_controller),
                e.recorded_at,
                e.recorded_at,
            ),
        )

    @handles(SessionStarted)
    def on_session_started(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        self._set(cur, e, run_id=ev.run_id, pid=ev.pid, start_token=ev.start_token)

    @handles(SessionDetached)
    def on_session_detached(self, cur: Any, e: RecordedEvent) -> None:
        self._set(cur, e, detached_by=e.event.by)  # type: ignore[attr-defined]

    @handles(SessionAttached)
    def on_session_attached(self, cur: Any, e: RecordedEvent) -> None:
        self._set(cur, e, detached_by=None)

    @handles(SessionPaused, SessionSuspended)
    def _controller_gone(self, cur: Any, e: RecordedEvent) -> None:
        self._set(cur, e, pid=None, start_token=None)

    @handles(SessionResumed)
    def on_session_resumed(self, cur: Any, e: RecordedEvent) -> None:
        run_id = e.event.run_id or None  # type: ignore[attr-defined]
        self._set(
            cur,
            e,
            pid=None,
            start_token=None,
            detached_by=None,
            **({"run_id": run_id} if run_id else {}),
        )

    @handles(SessionFinishing)
    def on_session_finishing(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        self._set(cur, e, requested=ev.requested, error=ev.error or None)

    @handles(SessionFinished)
    def on_session_finished(self, cur: Any, e: RecordedEvent) -> None:
        extra = {"detached_by": None} if e.state == "detached" else {}
        self._set(cur, e, requested=None, **extra)

    @handles(SessionStopping, SessionStopped, SessionCancelling, SessionCancelled)
    def _move(self, cur: Any, e: RecordedEvent) -> None:
        self._set(cur, e)

    @handles(SessionTainted)
    def on_session_tainted(self, cur: Any, e: RecordedEvent) -> None:
        reasons = cur.execute(
            "SELECT taint_reasons FROM sessions WHERE session_id = ?", (self._id(e),)
        ).fetchall()[0][0]
        updated = [*json.loads(reasons), e.event.reason]  # type: ignore[attr-defined]
        self._set(cur, e, tainted=1, taint_reasons=json.dumps(updated))

    @handles(SessionOwes)
    def on_session_owes(self, cur: Any, e: RecordedEvent) -> None:
        owed: Any = e.event.owed  # type: ignore[attr-defined]
        self._set(cur, e, owes_kind=owed.kind, owes_ref=owed.ref)

    @handles(SessionSettled)
    def on_session_settled(self, cur: Any, e: RecordedEvent) -> None:
        self._set(cur, e, owes_kind=None, owes_ref=None)
