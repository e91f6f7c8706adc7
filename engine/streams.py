"""The built-in projection: the head (version, state) of every stream.

Every log keeps it, and the log reads it inside the append transaction to check
``expected_version`` and the machine's current state: a primary-key lookup in a small table,
cheaper than finding the last event through the ``(stream_id, version)`` index and then the row
(ADR 0009). ``UNIQUE(stream_id, version)`` on ``events`` stays the backstop, so a damaged
``streams`` row can never make two events share a version.
"""

from __future__ import annotations

from typing import Any

from engine.events import RecordedEvent
from engine.projection import Folder, Projection


class StreamsProjection(Projection):
    """``streams``: one row per stream with its head version, state and positions."""

    head_sql = "SELECT version, state FROM streams WHERE stream_id = ?"

    name = "streams"
    version = 1
    tables = ("streams",)
    ddl = """
        CREATE TABLE streams (
            stream_id      TEXT    PRIMARY KEY,
            kind           TEXT    NOT NULL,
            version        INTEGER NOT NULL,
            state          TEXT    NOT NULL,
            first_position INTEGER NOT NULL,
            last_position  INTEGER NOT NULL,
            created_at     TEXT    NOT NULL,
            updated_at     TEXT    NOT NULL
        ) WITHOUT ROWID;
    """
    upsert_sql = (
        "INSERT INTO streams VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream_id) DO UPDATE"
        " SET version = excluded.version, state = excluded.state,"
        " last_position = excluded.last_position, updated_at = excluded.updated_at"
    )

    @staticmethod
    def _row(event: RecordedEvent) -> tuple[Any, ...]:
        kind = event.stream_id.partition(":")[0]
        return (
            event.stream_id,
            kind,
            event.version,
            event.state,
            event.position,
            event.position,
            event.recorded_at,
            event.recorded_at,
        )

    def apply(self, cursor: Any, event: RecordedEvent) -> None:
        cursor.execute(self.upsert_sql, self._row(event))

    def folder(self, cursor: Any) -> Folder:
        # Bulk path: fold in memory, write each stream once. Same rows as apply() per event.
        rows: dict[str, list[Any]] = {}

        def feed(event: RecordedEvent) -> None:
            row = rows.get(event.stream_id)
            if row is None:
                rows[event.stream_id] = list(self._row(event))
            else:
                row[2], row[3], row[5], row[7] = (
                    event.version,
                    event.state,
                    event.position,
                    event.recorded_at,
                )

        return Folder(feed, lambda: cursor.executemany(self.upsert_sql, rows.values()))


def head_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The ``streams`` rows for a run of event rows (``engine.chain.Row``), one per stream:
    the same rows ``StreamsProjection.apply`` leaves after each event in turn (the write path
    upserts them once per batch instead of once per event)."""
    heads: dict[str, list[Any]] = {}
    for position, stream_id, version, _, recorded_at, _, _, state, *_ in rows:
        head = heads.get(stream_id)
        if head is None:
            kind = stream_id.partition(":")[0]
            heads[stream_id] = [
                stream_id,
                kind,
                version,
                state,
                position,
                position,
                recorded_at,
                recorded_at,
            ]
        else:
            head[2], head[3], head[5], head[7] = version, state, position, recorded_at
    return [tuple(head) for head in heads.values()]
