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

    # The heads of every stream, computed by SQLite from the events table: the first and last
    # version of each stream come from the (stream_id, version) index alone, and two lookups
    # per stream fetch the rows. Same rows as ``apply`` after each event in turn.
    refold_sql = (
        "INSERT INTO streams SELECT h.stream_id,"
        " CASE WHEN instr(h.stream_id, ':') > 0"
        " THEN substr(h.stream_id, 1, instr(h.stream_id, ':') - 1) ELSE h.stream_id END,"
        " l.version, l.state, f.position, l.position, f.recorded_at, l.recorded_at"
        " FROM (SELECT stream_id, min(version) AS first, max(version) AS last"
        " FROM events GROUP BY stream_id) AS h"
        " JOIN events AS f ON f.stream_id = h.stream_id AND f.version = h.first"
        " JOIN events AS l ON l.stream_id = h.stream_id AND l.version = h.last"
        " WHERE true ON CONFLICT (stream_id) DO UPDATE"
        " SET version = excluded.version, state = excluded.state,"
        " last_position = excluded.last_position, updated_at = excluded.updated_at"
    )

    def folder(self, cursor: Any) -> Folder:
        # Bulk path (rebuilds, catch-up): wants no event at all, so a rebuild does not route
        # every event through Python for it; ``finish`` recomputes the heads in SQL (ADR 0021).
        return Folder(lambda event: None, lambda: cursor.execute(self.refold_sql), frozenset())

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

        return Folder(feed, lambda: cursor.executemany(self.upsert_sql, list(rows.values())))


def fold_head(
    heads: dict[str, list[Any]],
    stream_id: str,
    version: int,
    state: str | None,
    position: int,
    recorded_at: str,
) -> None:
    """Fold one event into ``heads`` (stream id -> the ``streams`` row as a list), as
    ``StreamsProjection.apply`` would: the first event opens the row, later ones move it on."""
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


def head_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The ``streams`` rows for a run of event rows (``engine.chain.Row``), one per stream:
    the same rows ``StreamsProjection.apply`` leaves after each event in turn (the write path
    upserts them once per batch instead of once per event)."""
    heads: dict[str, list[Any]] = {}
    for position, stream_id, version, _, recorded_at, _, _, state, *_ in rows:
        fold_head(heads, stream_id, version, state, position, recorded_at)
    return [tuple(head) for head in heads.values()]
