"""Read model: every entity whose rows a retention policy retired (ADR 0062), folded from
``retention.retired``: when, under which policy, when it had ended, and the idempotency key
that made it, which stays answered forever (``projections.queries.retired``)."""

from __future__ import annotations

from typing import Any

from engine.domain.retention import EntityRetired
from engine.events import Event, RecordedEvent
from projections.changes import Change, Fold, put
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
