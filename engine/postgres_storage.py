"""The PostgreSQL backend of the storage seam: one log per database schema, through psycopg 3.

Selected by a ``postgresql://`` URL (``FOLDLINE_DB``, ``--db``, ``open_log``); the schema comes
from ``?schema=`` (default ``foldline``), so one server holds many workspaces' logs.

Writers on any number of hosts serialise on one row: ``head`` holds the log's tail (position,
hash, epoch) and a change counter, and every write transaction starts by locking it ``FOR
UPDATE``. Positions are therefore assigned gap-free and in commit order, the chain extends from
the true tail, and the epoch check runs against the newest tenure (ADR 0026); a ``bigserial``
would commit out of order. ``UNIQUE (stream_id, version)`` and the primary keys of ``events``
and ``commands`` are backstops under the checks in ``engine.transaction``.

The counter answers ``Writer.begin``'s question (has anyone else committed since my last
commit?) the way SQLite's data version does; ``NOTIFY`` on the log's channel, sent by the
commit, is only a wake-up for readers (``engine.pg_notifier``), who then read by position.

Transactions run at READ COMMITTED: each statement after the head lock sees every commit made
before the lock was granted, which is all a writer needs (nobody else can write meanwhile).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool

from engine import chain, pg_arrays
from engine.errors import (
    InvalidArgument,
    InvalidEvent,
    NeedsMigration,
    NotALog,
    SchemaTooNew,
    StorageError,
    StorageFull,
)
from engine.pg_dialect import Dialect, PgConnection, PgCursor
from engine.postgres_schema import LATEST, MIGRATIONS
from engine.storage import CommandOutcome, CommandRow, EventRow, HeadRow
from engine.streams import StreamsProjection

DEFAULT_SCHEMA = "foldline"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
COLUMNS = (
    "position, stream_id, version, event_type, recorded_at, epoch, command_id, state, payload, hash"
)
# A write transaction is never idle for long: its statements follow each other with only the
# batch's Python in between (ms). One idle this long belongs to a frozen process.
IDLE_IN_TRANSACTION_S = 10.0
# Reads outside a transaction page by position: positions are gap-free and commit-ordered, so
# a page boundary never skips a row, and no connection is held while the caller iterates.
PAGE = 2000
_INSERT_EVENT = "INSERT INTO events VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
# A batch's events as one statement, each column an array literal (``engine.pg_arrays``): one
# execution on the server, and the client builds each column with one ``str.join``.
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
_PAGE_AFTER = f"SELECT {COLUMNS} FROM events WHERE position > %s ORDER BY position LIMIT %s"
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
_HEAD = "SELECT version, state FROM streams WHERE stream_id = %s"
_HEADS = "SELECT stream_id, version, state FROM streams WHERE stream_id = ANY(%s)"
_UPSERT_HEAD = StreamsProjection.upsert_sql.replace("?", "%s")
# The heads of a batch's streams (one row per stream) as one statement, columns as array
# literals: one execution on the server for all of them instead of one per row.
_UPSERT_HEADS = (
    "INSERT INTO streams SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[],"
    " %s::text[], %s::bigint[], %s::bigint[], %s::text[], %s::text[]) ON CONFLICT "
    + StreamsProjection.upsert_sql.partition(" ON CONFLICT ")[2]
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


def split_url(url: str) -> tuple[str, str]:
    """``(conninfo, schema)`` of a ``postgresql://`` URL with an optional ``schema=``.

    Raises:
        InvalidArgument: not a PostgreSQL URL, or a schema name that is not a plain identifier.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise InvalidArgument(f"not a PostgreSQL URL: {redact(url)}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    schema = schemas[-1] if schemas else DEFAULT_SCHEMA
    if not _SCHEMA_NAME.match(schema):
        raise InvalidArgument(
            f"schema must be a lower-case identifier (a-z, 0-9, _; at most 63), got {schema!r}"
        )
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def redact(url: str) -> str:
    """The URL without its password, for messages and ``Storage.path``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def translate(ex: BaseException) -> BaseException:
    """The one place psycopg errors become engine errors; anything else is returned unchanged."""
    if isinstance(ex, pg_errors.UndefinedTable):
        return NotALog(f"not a foldline log: {ex}")
    if isinstance(ex, psycopg.DataError) and "NUL (0x00)" in str(ex):
        # psycopg refuses, before sending, a str with U+0000 for a text column of a read model
        # (PostgreSQL text cannot hold it; the payload itself is bytea): the event's fault.
        return InvalidEvent(
            "PostgreSQL cannot store the NUL character (U+0000) in a read model's text"
        )
    if isinstance(ex, pg_errors.DiskFull):  # SQLSTATE 53100: the server's disk is full
        return StorageFull(f"postgresql: {type(ex).__name__}: {str(ex).strip()}")
    if isinstance(ex, psycopg.Error):
        return StorageError(f"postgresql: {type(ex).__name__}: {str(ex).strip()}")
    return ex


def channel(schema: str) -> str:
    """The ``LISTEN``/``NOTIFY`` channel of the log in ``schema``."""
    return f"foldline_{schema}"


class PostgresWriter:
    """The write side on this process's writer connection (see ``engine.storage``)."""

    # ``begin`` waits for the server (the head row's lock): the group commit's leader takes
    # it while the batch's callers are still queueing (``engine.transaction.run_batch``).
    begins_while_gathering = True

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

    def commit_with(
        self, rows: Sequence[EventRow], heads: Sequence[HeadRow], commands: Sequence[CommandRow]
    ) -> None:
        """Write the batch's last buffered rows and commit, waiting for the server once: the
        events, the stream heads (a statement each, whatever their number), the commands, the
        head row, the wake-up and ``COMMIT`` go as one pipeline, answered together. A failure
        anywhere skips the rest, ``COMMIT`` included (PostgreSQL discards a pipeline's
        statements after an error), and is raised here."""
        if len(rows) < 2:
            # A lone event: its statements one by one and ``commit``'s one simple query
            # measured faster than a pipeline, whose own overhead outweighs one round trip.
            self.insert_events(rows)
            self.upsert_heads(heads)
            self.insert_commands(commands)
            self.commit()
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

    def commit(self) -> None:
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
        row = self._execute(_HEAD, (stream_id,)).fetchone()
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
        return _paged(lambda after: _page(self.conn.cursor(), after, types), position)


def _page(cursor: Any, after: int, types: list[str] | None) -> list[EventRow]:
    if types is None:
        rows: list[EventRow] = cursor.execute(_PAGE_AFTER, (after, PAGE)).fetchall()
    else:
        rows = cursor.execute(_PAGE_AFTER_OF_TYPES, (after, types, PAGE)).fetchall()
    return rows


def _paged(fetch: Any, position: int, limit: int | None = None) -> Iterator[EventRow]:
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


class PostgresStorage:
    """One log in one schema: a pool for reads, per-thread read connections, one writer."""

    def __init__(
        self,
        url: str,
        *,
        readonly: bool = False,
        pool_size: int = 4,
        idle_in_transaction_s: float = IDLE_IN_TRANSACTION_S,
    ) -> None:
        self.url = url
        self.idle_in_transaction_s = idle_in_transaction_s
        self.conninfo, self.schema = split_url(url)
        self.path = redact(url)
        self.readonly = readonly
        self.dialect = Dialect()
        self._closed = False
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[tuple[int, psycopg.Connection[Any]]] = []
        self._writer: tuple[int, PostgresWriter] | None = None
        self._pool_size = pool_size
        self._pool: tuple[int, ConnectionPool[Any]] | None = None

    translate = staticmethod(translate)

    @property
    def channel(self) -> str:
        return channel(self.schema)

    def notifier(self, log: Any) -> Any:
        """The wake-ups of this backend (``engine.notifier.open_notifier``): LISTEN, no polling."""
        from engine.pg_notifier import PgNotifier

        return PgNotifier(log, self)

    # -- connections ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"{self.path}: the log is closed")

    def _kwargs(self) -> dict[str, Any]:
        options = f"-c search_path={self.schema}"
        if self.readonly:
            options += " -c default_transaction_read_only=on"
        return {"autocommit": True, "options": options}

    def _connect(self, writer: bool = False) -> psycopg.Connection[Any]:
        self._check_open()
        kwargs = self._kwargs()
        if writer:
            # A writer frozen inside its transaction (SIGSTOP, a paused VM) holds the head
            # row's lock, and every host's writes would wait behind it, the takeover's too.
            # The server ends such a connection: its transaction rolls back, nothing lands.
            idle_ms = int(self.idle_in_transaction_s * 1000)
            kwargs["options"] += f" -c idle_in_transaction_session_timeout={idle_ms}"
        try:
            conn = psycopg.connect(self.conninfo, **kwargs)
        except psycopg.Error as ex:
            raise translate(ex) from ex
        with self._lock:
            self._connections.append((os.getpid(), conn))
        return conn

    def pool(self) -> ConnectionPool[Any]:
        """This process's pool of read connections (made on first use, never across fork)."""
        self._check_open()
        held = self._pool
        if held is not None and held[0] == os.getpid():
            return held[1]
        with self._lock:
            held = self._pool
            if held is not None and held[0] == os.getpid():
                return held[1]
            pool: ConnectionPool[Any] = ConnectionPool(
                self.conninfo,
                min_size=1,
                max_size=self._pool_size,
                kwargs=self._kwargs(),
                open=True,
                timeout=30,
            )
            self._pool = (os.getpid(), pool)
        return pool

    def connection(self) -> PgConnection:
        """This thread's read connection (autocommit; SQLite's dialect, see ``pg_dialect``)."""
        self._check_open()
        held = getattr(self._local, "held", None)
        if held is not None and held[0] == os.getpid() and not held[1].raw.closed:
            conn: PgConnection = held[1]
            return conn
        wrapped = PgConnection(self._connect(), self.dialect)
        self._local.held = (os.getpid(), wrapped)
        return wrapped

    def writer(self) -> PostgresWriter:
        self._check_open()
        if self.readonly:
            raise StorageError(f"{self.path}: opened read-only")
        held = self._writer
        # A connection the server dropped (restart, failover) is replaced on the next batch;
        # the batch that saw it fail has already failed whole, so nothing is half-written.
        if held is not None and held[0] == os.getpid() and not held[1].conn.closed:
            return held[1]
        writer = PostgresWriter(self._connect(writer=True), self.dialect, self.schema)
        self._writer = (os.getpid(), writer)
        return writer

    def close(self) -> None:
        self._closed = True
        with self._lock:
            mine = [c for pid, c in self._connections if pid == os.getpid()]
            self._connections.clear()
            pool, self._pool = self._pool, None
        for conn in mine:
            with contextlib.suppress(Exception):
                conn.close()
        if pool is not None and pool[0] == os.getpid():
            with contextlib.suppress(Exception):
                pool[1].close()
        self._local = threading.local()
        self._writer = None

    # -- reads ---------------------------------------------------------------------------

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        # An idle pooled connection may have lost its server (restart, failover): the pool
        # drops a broken one when it comes back, so one more try gets a fresh connection.
        for attempt in (1, 2):
            try:
                with self.pool().connection() as conn:
                    rows: list[Any] = conn.execute(sql, params).fetchall()
                return rows
            except psycopg.OperationalError as ex:
                if attempt == 2:
                    raise translate(ex) from ex
            except psycopg.Error as ex:
                raise translate(ex) from ex
        raise AssertionError("unreachable")

    def rows_after(self, after_position: int, limit: int | None = None) -> Iterator[EventRow]:
        def fetch(after: int) -> list[EventRow]:
            size = PAGE if limit is None else min(PAGE, limit)
            return self._query(_PAGE_AFTER, (after, size))

        if limit is not None and limit <= PAGE:
            return iter(fetch(after_position))
        return _paged(fetch, after_position, limit)

    def stream_rows(self, stream_id: str, after_version: int) -> list[EventRow]:
        return self._query(
            f"SELECT {COLUMNS} FROM events WHERE stream_id = %s AND version > %s ORDER BY version",
            (stream_id, after_version),
        )

    def hash_at(self, position: int) -> bytes | None:
        rows = self._query("SELECT hash FROM events WHERE position = %s", (position,))
        return bytes(rows[0][0]) if rows else None

    def max_position(self) -> int:
        # The head row is the tail, committed with the events it describes.
        rows = self._query("SELECT position FROM head WHERE id = 1")
        return int(rows[0][0]) if rows else 0

    def stream_head(self, stream_id: str) -> tuple[int, str] | None:
        rows = self._query(_HEAD, (stream_id,))
        return (rows[0][0], rows[0][1]) if rows else None

    def data_version(self) -> int:
        """The head row's change counter: it moves with every write transaction's commit."""
        rows = self._query("SELECT changes FROM head WHERE id = 1")
        return int(rows[0][0]) if rows else 0

    @contextlib.contextmanager
    def content_cursor(self) -> Iterator[Any]:
        with self.pool().connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield PgCursor(conn.cursor(), self.dialect)
            finally:
                conn.execute("COMMIT")

    # -- opening -------------------------------------------------------------------------

    def migrate(self, recorded_at: str) -> int:
        """Create the schema and bring it to the newest migration (``engine.postgres_schema``).

        Concurrent openers serialise on a transaction-scoped advisory lock (released by the
        commit, so it cannot outlive a crashed opener)."""
        writer = self.writer()
        execute = writer.conn.execute
        try:
            execute("BEGIN")
            execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"foldline:{self.schema}",))
            execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
            current = self._applied(writer.conn)
            if current > LATEST:
                raise SchemaTooNew(self.path, current, LATEST)
            for migration in MIGRATIONS:
                if migration.number > current:
                    execute(migration.sql)
                    execute(
                        "INSERT INTO schema_migrations VALUES (%s, %s, %s)",
                        (migration.number, migration.name, recorded_at),
                    )
            execute("COMMIT")
        except BaseException as ex:
            with contextlib.suppress(psycopg.Error):
                execute("ROLLBACK")
            raise translate(ex) from ex
        return LATEST

    def _applied(self, conn: psycopg.Connection[Any]) -> int:
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (self.schema,),
            )
        }
        if not tables:
            return 0
        if "schema_migrations" not in tables or "head" not in tables:
            raise NotALog(f"{self.path}: schema {self.schema} holds tables, but not a foldline log")
        row = conn.execute("SELECT max(number) FROM schema_migrations").fetchone()
        return int(row[0] or 0) if row else 0

    def applied(self) -> int:
        """The newest migration the schema records (0: no log there yet)."""
        try:
            with self.pool().connection() as conn:
                return self._applied(conn)
        except psycopg.Error as ex:
            raise translate(ex) from ex

    def check_current(self, wanted: dict[str, int]) -> None:
        try:
            with self.pool().connection() as conn:
                schema = self._applied(conn)
                if schema == 0:
                    raise NotALog(f"{self.path}: no foldline log in schema {self.schema}")
                stored = dict(
                    conn.execute(
                        "SELECT name, version FROM projections WHERE checkpoint IS NULL"
                    ).fetchall()
                )
        except psycopg.Error as ex:
            raise translate(ex) from ex
        if schema != LATEST or any(stored.get(n) != v for n, v in wanted.items()):
            raise NeedsMigration(f"{self.path}: schema or projections are not current")


__all__ = ["DEFAULT_SCHEMA", "PostgresStorage", "channel", "redact", "split_url"]
