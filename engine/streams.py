"""The built-in projection: the head (version, state) of every stream.

Every log keeps it, and the log reads it inside the append transaction to check
``expected_version`` and the machine's current state (ADR 0009). ``UNIQUE(stream_id, version)``
on ``events`` stays the backstop, so a damaged ``streams`` row can never make two events share
a version. Its SQL is the storage's (``engine.storage.streams_table``), which the backends'
writers run too; this module folds events into it.
"""

from __future__ import annotations

from typing import Any

from engine.events import RecordedEvent
from engine.projection import Folder, Projection
from engine.storage.streams_table import REFOLD_SQL, STREAMS_DDL, UPSERT_SQL


class StreamsProjection(Projection):
    """``streams``: one row per stream with its head version, state and positions."""

    name = "streams"
    version = 1
    tables = ("streams",)
    ddl = STREAMS_DDL

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
        cursor.execute(UPSERT_SQL, self._row(event))

    def folder(self, cursor: Any) -> Folder:
        # Bulk path (rebuilds, catch-up): wants no event at all, so a rebuild does not route
        # every event through Python for it; ``finish`` recomputes the heads in SQL (ADR 0021).
        return Folder(lambda event: None, lambda: cursor.execute(REFOLD_SQL), frozenset())

    def replay_folder(self, cursor: Any) -> Folder:
        """A bulk fold fed every event, for a database that holds no ``events`` rows (the
        audit's refold into a scratch copy): folds in memory and writes each stream once.
        Same rows as ``apply`` after each event in turn."""
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

        return Folder(feed, lambda: cursor.executemany(UPSERT_SQL, list(rows.values())))
