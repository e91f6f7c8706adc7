"""Read model: every entity whose rows a retention policy retired (ADR 0062), folded from
``retention.retired``: when, under which policy, when it had ended, and the idempotency key
that made it, which stays answered forever (``projections.queries.retired``)."""

from __future__ import annotations

from typing import Any

from engine.domain.retention import EntityRetired
from engine.events import Event, RecordedEvent
from projections.changes import Change, Delete, Fold, put
from projections.fold import FoldedProjection


def retired(e: RecordedEvent, entity: str) -> Change:
    ev: Any = e.event
    return put(
        (entity, ev.kind),
        retired_at=e.recorded_at,
        position=e.position,
        policy=ev.policy,
        ended_at=ev.ended_at,
        command_id=ev.command_id,
    )


def retires(kind: str) -> Fold:
    """The fold of ``retention.retired`` for the read model of machine ``kind``: its row goes
    (the row of another machine's entity of the same id stays)."""

    def fold(e: RecordedEvent, entity: str) -> Change:
        return Delete(entity) if e.event.kind == kind else None  # type: ignore[attr-defined]

    return fold


def delete_retired(cur: Any, e: RecordedEvent, kind: str, table: str, key: str) -> None:
    """``retires`` for a read model folded by SQL handlers."""
    if e.event.kind == kind:  # type: ignore[attr-defined]
        cur.execute(f"DELETE FROM {table} WHERE {key} = ?", (e.stream_id.partition(":")[2],))


FOLDS: dict[type[Event], Fold] = {EntityRetired: retired}


class RetiredProjection(FoldedProjection):
    name = "retired"
    version = 1
    tables = ("retired",)
    folds_by_entity = True  # every row from its own entity's retention stream
    ddl = """
        CREATE TABLE retired (
            entity_id  TEXT    NOT NULL,
            kind       TEXT    NOT NULL,
            retired_at TEXT    NOT NULL,
            position   INTEGER NOT NULL,
            policy     TEXT    NOT NULL,
            ended_at   TEXT    NOT NULL,
            command_id TEXT,
            PRIMARY KEY (entity_id, kind)
        ) WITHOUT ROWID;
        CREATE INDEX retired_by_command ON retired (command_id) WHERE command_id IS NOT NULL;
    """
    key = ("entity_id", "kind")
    folds = FOLDS
