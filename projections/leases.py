"""Read model: every lease, its holder and epoch."""

from __future__ import annotations

from typing import Any

from engine.domain import ids
from engine.domain.lease import (
    LeaseAcquired,
    LeaseNewLog,
    LeaseReleased,
    LeaseRenewed,
    LeaseTakenOver,
)
from engine.events import RecordedEvent
from engine.projection import DispatchProjection, Folder, handles
from projections import memory


class LeasesProjection(DispatchProjection):
    name = "leases"
    version = 1
    tables = ("leases",)
    folds_by_entity = True  # every row from its own entity's streams
    ddl = """
        CREATE TABLE leases (
            name        TEXT    PRIMARY KEY,
            state       TEXT    NOT NULL,
            version     INTEGER NOT NULL,
            holder      TEXT    NOT NULL,
            host        TEXT    NOT NULL,
            pid         INTEGER NOT NULL,
            epoch       INTEGER NOT NULL,
            acquired_at TEXT    NOT NULL,
            renewed_at  TEXT    NOT NULL,
            updated_at  TEXT    NOT NULL
        ) WITHOUT ROWID;
    """

    @staticmethod
    def _name(event: RecordedEvent) -> str:
        return ids.entity_of(event.stream_id)

    def memory_folder(self, cursor: Any) -> Folder:
        return memory.leases_folder(cursor)

    @handles(LeaseAcquired, LeaseTakenOver)
    def _tenure(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        cur.execute(
            "INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE"
            " SET state = excluded.state, version = excluded.version, holder = excluded.holder,"
            " host = excluded.host, pid = excluded.pid, epoch = excluded.epoch,"
            " acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at,"
            " updated_at = excluded.updated_at",
            (
                self._name(e),
                e.state,
                e.version,
                ev.holder,
                ev.host,
                ev.pid,
                ev.epoch,
                e.recorded_at,
                e.recorded_at,
                e.recorded_at,
            ),
        )

    @handles(LeaseRenewed, LeaseReleased, LeaseNewLog)
    def _touch(self, cur: Any, e: RecordedEvent) -> None:
        cur.execute(
            "UPDATE leases SET state = ?, version = ?, renewed_at = ?, updated_at = ?"
            " WHERE name = ?",
            (e.state, e.version, e.recorded_at, e.recorded_at, self._name(e)),
        )
