"""Read model: every lease, its holder and epoch, and what each lease event does to its row
(written as SQL and in memory by ``projections.fold``)."""

from __future__ import annotations

from typing import Any

from engine.domain.lease import (
    LeaseAcquired,
    LeaseCheckpointSigned,
    LeaseNewLog,
    LeaseReleased,
    LeaseRenewed,
    LeaseTakenOver,
)
from engine.events import Event, RecordedEvent
from projections.changes import Change, Fold, put, update
from projections.fold import FoldedProjection


def tenure(e: RecordedEvent, name: str) -> Change:
    """Acquired or taken over: the whole row again."""
    ev: Any = e.event
    at = e.recorded_at
    return put(
        name,
        state=e.state,
        version=e.version,
        holder=ev.holder,
        host=ev.host,
        pid=ev.pid,
        epoch=ev.epoch,
        acquired_at=at,
        renewed_at=at,
        updated_at=at,
    )


def touch(e: RecordedEvent, name: str) -> Change:
    """Renewed, released, or moved to a new log: the same holder, a later time."""
    at = e.recorded_at
    return update(name, state=e.state, version=e.version, renewed_at=at, updated_at=at)


def advance(e: RecordedEvent, name: str) -> Change:
    """A checkpoint signed: the row follows its stream's version, nothing else changes."""
    return update(name, state=e.state, version=e.version, updated_at=e.recorded_at)


FOLDS: dict[type[Event], Fold] = {
    LeaseAcquired: tenure,
    LeaseTakenOver: tenure,
    LeaseRenewed: touch,
    LeaseReleased: touch,
    LeaseNewLog: touch,
    LeaseCheckpointSigned: advance,
}


class LeasesProjection(FoldedProjection):
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

    key = ("name",)
    folds = FOLDS
