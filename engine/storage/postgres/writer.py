"""The PostgreSQL backend's write side: one connection per process, the head row's lock.

Writers on any number of hosts serialise on one row: ``head`` holds the log's tail (position,
hash, epoch) and a change counter, and every write transaction starts by locking it ``FOR
UPDATE``. Positions are therefore assigned gap-free and in commit order, the chain extends from
the true tail, and the epoch check runs against the newest tenure (ADR 0026); a ``bigserial``
would commit out of order. ``UNIQUE (stream_id, version)`` and the primary keys of ``events``
and ``commands`` are backstops under the checks in ``engine.write.transaction``.

The counter answers ``Writer.begin``'s question (has anyone else committed since my last
commit?) the way SQLite's data version does; ``NOTIFY`` on the log's channel, sent by the
commit, is only a wake-up for readers (``engine.storage.postgres.listen``), who then read by
position. A batch's rows go as one statement per table, each column an array literal
(``engine.storage.postgres.arrays``), and its last ones with the COMMIT, in one pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from engine import chain
from engine.errors import StorageError
from engine.storage.postgres import arrays as pg_arrays
from engine.storage.postgres.dialect import Dialect, PgCursor
from engine.storage.postgres.url import channel
from engine.storage.seam import (
    NOTHING_BUFFERED,
    Buffered,
    CommandOutcome,
    CommandRow,
    EventRow,
    HeadRow,
    WriterCapabilities,
)
from engine.storage.streams_table import UPSERT_SQL

COLUMNS = (
    "position, stream_id, version, event_type, recorded_at, epoch, command_id, state, payload, hash"
)
# Reads outside a transaction page by position: positions are gap-free and commit-ordered, so
# a page boundary never skips a row, and no connection is held while the caller iterates.
PAGE = 2000
_INSERT_EVENT = "INSERT INTO events VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
# A batch's events as one statement, each column an array literal (``arrays``): one execution
# on the server, and the client builds each column with one ``str.join``.
_INSERT_EVENTS = (
    f"INSERT INTO events ({COLUMNS}) SELECT * FROM unnest(%s::bigint[], %s::text[],"
    " %s::bigint[], %s::text[], %s::text[], %s::bigint[], %s::text[], %s::text[],"
    " %s::bytea[], %s::bytea[])"
)
_EVENT_KINDS = (
    pg_arrays.bigints,
    pg_arrays.texts,
    pg_arrays.bigints,
    pg_arrays.texts,
    pg_arrays.texts,
    pg_arrays.bigints,
    pg_arrays.texts,
    pg_arrays.texts,
    pg_arrays.byteas,
    pg_arrays.byteas,
)
_UPDATE_HEAD = "UPDATE head SET position = %s, hash = %s, epoch = %s, changes = %s WHERE id = 1"
_NOTIFY = "SELECT pg_notify(%s, %s)"
_INSERT_COMMAND = "INSERT INTO commands VALUES (%s, %s, %s, %s)"
PAGE_AFTER = f"SELECT {COLUMNS} FROM events WHERE position > %s ORDER BY position LIMIT %s"
_PAGE_AFTER_OF_TYPES = (
    f"SELECT {COLUMNS} FROM events WHERE position > %s AND event_type = ANY(%s)"
    " ORDER BY position LIMIT %s"
)
_LOCK_HEAD = "SELECT position, hash, epoch, changes FROM head WHERE id = 1 FOR UPDATE"
_COMMAND = (
    "SELECT c.stream_id, c.first_position, c.last_position, f.version, l.version, l.state"
    " FROM commands c JOIN events f ON f.position = c.first_position"
    " JOIN events l ON l.position = c.last_position WHERE c.command_id = %s"
)
HEAD = "SELECT version, state FROM streams WHERE stream_id = %s"
_HEADS = "SELECT stream_id, version, state FROM streams WHERE stream_id = ANY(%s)"
_UPSERT_HEAD = UPSERT_SQL.replace("?", "%s")
# The heads of a batch's streams (one row per stream) as one statement, columns as array
# literals: one execution on the server for all of them instead of one per row.
_UPSERT_HEADS = (
    "INSERT INTO streams SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[],"
    " %s::text[], %s::bigint[], %s::bigint[], %s::text[], %s::text[]) ON CONFLICT "
    + UPSERT_SQL.partition(" ON CONFLICT ")[2]
)
_HEAD_KINDS = (
    pg_arrays.texts,
    pg_arrays.texts,
    pg_arrays.bigints,
    pg_arrays.texts,
    pg_arrays.bigints,
    pg_arrays.bigints,
    pg_arrays.texts,
    pg_arrays.texts,
)


class PostgresWriter:
    """The write side on this process's writer connection (see ``engine.storage``)."""

    # ``begin`` waits for the server (the head row's lock): the group commit's leader takes
    # it while the batch's callers are still queueing (``engine.write.batch``); and a lookup is a
    # round trip, so a batch reads its streams' heads at once (``Transaction.read_heads``).
    capabilities = WriterCapabilities(begins_while_gathering=True, reads_heads_at_once=True)

    def __init__(self, conn: psycopg.Connection[Any], dialect: Dialect, schema: str) -> None:
        self.conn = conn
        self._raw = conn.cursor()
        self._cursor = PgCursor(self._raw, dialect)
        self._execute = self._raw.execute
        self._channel = channel(schema)
        self._changes_after_commit: int | None = None
        self._head: tuple[int, bytes, int, int] = (0, chain.GENESIS, 0, 0)
        # The tail as this transaction's inserts left it, and its value at each savepoint.
        self._tail: tuple[int, bytes, int] = (0, chain.GENESIS, 0)
        self._marks: list[tuple[int, bytes, int]] = []
        self._open = False

    @property
    def cursor(self) -> PgCursor:
        return self._cursor

    def begin(self) -> bool:
        # One round trip: BEGIN and the head lock as one simple query (its second result).
        self._raw.execute(f"BEGIN; {_LOCK_HEAD}")
        self._open = True
        self._raw.nextset()
        position, hash_, epoch, changes = self._raw.fetchone() or (0, b"", 0, 0)
        hash_ = bytes(hash_) if position else chain.GENESIS
        self._head = (position, hash_, epoch, changes)
        self._tail = (position, hash_, epoch)
        self._marks = []
        return bool(changes == self._changes_after_commit)

    def commit(self, buffered: Buffered = NOTHING_BUFFERED) -> None:
        """Write the batch's last buffered rows and commit, waiting for the server once: the
        events, the stream heads (a statement each, whatever their number), the commands, the
        head row, the wake-up and ``COMMIT`` go as one pipeline, answered together. A failure
        anywhere skips the rest, ``COMMIT`` included (PostgreSQL discards a pipeline's
        statements after an error), and is raised here."""
        rows, heads, commands = buffered
        if len(rows) < 2:
            # A lone event: its statements one by one and ``_commit_head``'s one simple query
            # measured faster than a pipeline, whose own overhead outweighs one round trip.
            self.insert_events(rows)
            self.upsert_heads(heads)
            self.insert_commands(commands)
            self._commit_head()
            return
        self._check_order(rows)
        raw = self._raw
        last = rows[-1]
        self._tail = (last[0], last[9], last[5])
        position, hash_, epoch = self._tail
        changes = self._head[3] + 1
        with self.conn.pipeline():
            self._insert_events(rows)
            self._upsert_heads(heads)
            if commands:
                raw.executemany(_INSERT_COMMAND, commands)
            raw.execute(_UPDATE_HEAD, (position, hash_, epoch, changes))
            if position != self._head[0]:
                # Delivered by PostgreSQL at COMMIT, to listeners only: a wake-up, not data.
                raw.execute(_NOTIFY, (self._channel, str(position)))
            raw.execute("COMMIT")
        self._open = False
        self._changes_after_commit = changes

    def _commit_head(self) -> None:
        position, hash_, epoch = self._tail
        changes = self._head[3] + 1
        # One round trip: the head row, the wake-up and COMMIT as one simple query. Its
        # values are ints and a hex literal made here, never text from a caller. NOTIFY is
        # delivered by PostgreSQL at COMMIT, to listeners only: a wake-up, not the data.
        notify = f"NOTIFY {self._channel}, '{position}'; " if position != self._head[0] else ""
        self._raw.execute(
            f"UPDATE head SET position = {int(position)}, hash = '\\x{hash_.hex()}'::bytea,"
            f" epoch = {int(epoch)}, changes = {int(changes)} WHERE id = 1; {notify}COMMIT"
        )
        self._open = False
        self._changes_after_commit = changes

    def rollback(self) -> None:
        if self._open:
            self._open = False
            self._execute("ROLLBACK")
            # The database is again what ``begin`` found under the lock.
            self._changes_after_commit = self._head[3]

    def savepoint(self) -> None:
        self._marks.append(self._tail)
        self._execute("SAVEPOINT work")

    def release_savepoint(self) -> None:
        self._marks.pop()
        self._execute("RELEASE SAVEPOINT work")

    def rollback_to_savepoint(self) -> None:
        self._tail = self._marks[-1]
        self._execute("ROLLBACK TO SAVEPOINT work")

    def tail(self) -> tuple[int, bytes, int]:
        position, hash_, epoch, _ = self._head
        return position, hash_, epoch

    def stream_head(self, stream_id: str) -> tuple[int, str] | None:
        row = self._execute(HEAD, (stream_id,)).fetchone()
        return (row[0], row[1]) if row else None

    def stream_heads(self, stream_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """``stream_head`` of many streams in one round trip (absent: not in the result)."""
        rows = self._execute(_HEADS, (list(stream_ids),)).fetchall()
        return {stream_id: (version, state) for stream_id, version, state in rows}

    def collided(self, ex: BaseException) -> bool:
        """Whether ``ex`` is a row the server refused as a duplicate key: what a stream taken
        as new that is not (``Transaction.read_heads``) makes of the batch's commit."""
        return isinstance(ex, pg_errors.UniqueViolation)

    def command_outcome(self, command_id: str) -> CommandOutcome | None:
        row = self._execute(_COMMAND, (command_id,)).fetchone()
        return tuple(row) if row else None

    def insert_events(self, rows: Sequence[EventRow]) -> None:
        if not rows:
            return
        self._check_order(rows)
        self._insert_events(rows)
        last = rows[-1]
        self._tail = (last[0], last[9], last[5])

    def _insert_events(self, rows: Sequence[EventRow]) -> None:
        if len(rows) == 1:
            self._execute(_INSERT_EVENT, rows[0])
        else:
            self._execute(_INSERT_EVENTS, pg_arrays.columns(rows, _EVENT_KINDS))

    def _check_order(self, rows: Sequence[EventRow]) -> None:
        if rows and rows[0][0] != self._tail[0] + 1:
            # A backstop under the head lock: the batch was chained from a stale tail.
            raise StorageError(
                f"postgresql: append at position {rows[0][0]} after tail {self._tail[0]}"
            )

    def upsert_heads(self, rows: Sequence[HeadRow]) -> None:
        if rows:
            self._upsert_heads(rows)

    def _upsert_heads(self, rows: Sequence[HeadRow]) -> None:
        if len(rows) == 1:
            self._execute(_UPSERT_HEAD, rows[0])
        else:
            self._execute(_UPSERT_HEADS, pg_arrays.columns(rows, _HEAD_KINDS))

    def insert_commands(self, rows: Sequence[CommandRow]) -> None:
        if rows:
            self._raw.executemany(_INSERT_COMMAND, rows)

    def rows_after(
        self, position: int, event_types: frozenset[str] | None = None
    ) -> Iterator[EventRow]:
        # A cursor of its own per page: the caller may write on the writer's cursor meanwhile.
        types = None if event_types is None else sorted(event_types)
        return paged(lambda after: page(self.conn.cursor(), after, types), position)


def page(cursor: Any, after: int, types: list[str] | None) -> list[EventRow]:
    if types is None:
        rows: list[EventRow] = cursor.execute(PAGE_AFTER, (after, PAGE)).fetchall()
    else:
        rows = cursor.execute(_PAGE_AFTER_OF_TYPES, (after, types, PAGE)).fetchall()
    return rows


def paged(fetch: Any, position: int, limit: int | None = None) -> Iterator[EventRow]:
    left = limit
    while left is None or left > 0:
        rows = fetch(position)
        if left is not None:
            rows = rows[:left]
            left -= len(rows)
        yield from rows
        if len(rows) < PAGE:
            return
        position = rows[-1][0]
