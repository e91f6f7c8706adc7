"""The ``streams`` table, the head (version, state) of every stream, in SQL: what the built-in
projection (``engine.streams``) and every backend's writer run on it, written once.

The log reads a head inside the append transaction to check ``expected_version`` and the
machine's current state: a primary-key lookup in a small table, cheaper than finding the last
event through the ``(stream_id, version)`` index and then the row (ADR 0009). The write path
upserts the heads once per batch, one row per stream (``head_rows``), the same rows the
projection's ``apply`` leaves after each event in turn (ADR 0021). In SQLite's dialect, with
``?`` placeholders; the PostgreSQL backend translates it.
"""

from __future__ import annotations

from typing import Any

STREAMS_DDL = """
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
HEAD_SQL = "SELECT version, state FROM streams WHERE stream_id = ?"
UPSERT_SQL = (
    "INSERT INTO streams VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream_id) DO UPDATE"
    " SET version = excluded.version, state = excluded.state,"
    " last_position = excluded.last_position, updated_at = excluded.updated_at"
)
# The heads of every stream, computed by the database from the events table: the first and last
# version of each stream come from the (stream_id, version) index alone, and two lookups per
# stream fetch the rows. Same rows as ``UPSERT_SQL`` after each event in turn.
REFOLD_SQL = (
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
    if len(rows) == 1:  # a lone append's: its one event opens or moves the row alike
        position, stream_id, version, _, recorded_at, _, _, state, *_ = rows[0]
        kind = stream_id.partition(":")[0]
        return [(stream_id, kind, version, state, position, position, recorded_at, recorded_at)]
    heads: dict[str, list[Any]] = {}
    for position, stream_id, version, _, recorded_at, _, _, state, *_ in rows:
        fold_head(heads, stream_id, version, state, position, recorded_at)
    return [tuple(head) for head in heads.values()]
