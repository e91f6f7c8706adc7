"""The PostgreSQL backend of the storage seam: one log per database schema, through psycopg 3.

Selected by a ``postgresql://`` URL (``FOLDLINE_DB``, ``--db``, ``open_log``; the selector is
``engine.storage.open_storage``); the schema comes from ``?schema=`` (default ``foldline``), so
one server holds many workspaces' logs. This module is the log's connections, its reads outside
the write transaction and its opening; the writer is ``engine.storage.postgres.writer``, the
wake-ups ``engine.storage.postgres.listen``.

Transactions run at READ COMMITTED: each statement after the head lock sees every commit made
before the lock was granted, which is all a writer needs (nobody else can write meanwhile).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool

from engine import process
from engine.errors import (
    InvalidEvent,
    NeedsMigration,
    NotALog,
    SchemaTooNew,
    StorageError,
    StorageFull,
)
from engine.storage.postgres.dialect import Dialect, PgConnection, PgCursor
from engine.storage.postgres.listen import Listener
from engine.storage.postgres.schema import LATEST, MIGRATIONS
from engine.storage.postgres.url import channel, redact, split_url
from engine.storage.postgres.writer import (
    COLUMNS,
    HEAD,
    PAGE,
    PAGE_AFTER,
    PostgresWriter,
    paged,
)
from engine.storage.seam import EventRow

# A write transaction is never idle for long: its statements follow each other with only the
# batch's Python in between (ms). One idle this long belongs to a frozen process.
IDLE_IN_TRANSACTION_S = 10.0


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

    def wakeups(self) -> Listener:
        """LISTEN on the log's channel instead of polling (``engine.notifier``)."""
        return Listener(self.conninfo, self.channel)

    def lost(self) -> str | None:
        """Never: a server's log is not a file that can vanish under this process."""
        return None

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
            self._connections.append((process.pid(), conn))
        return conn

    def pool(self) -> ConnectionPool[Any]:
        """This process's pool of read connections (made on first use, never across fork)."""
        self._check_open()
        held = self._pool
        if held is not None and held[0] == process.pid():
            return held[1]
        with self._lock:
            held = self._pool
            if held is not None and held[0] == process.pid():
                return held[1]
            pool: ConnectionPool[Any] = ConnectionPool(
                self.conninfo,
                min_size=1,
                max_size=self._pool_size,
                kwargs=self._kwargs(),
                open=True,
                timeout=30,
            )
            self._pool = (process.pid(), pool)
        return pool

    def connection(self) -> PgConnection:
        """This thread's read connection (autocommit; SQLite's dialect, see ``dialect``)."""
        self._check_open()
        held = getattr(self._local, "held", None)
        if held is not None and held[0] == process.pid() and not held[1].raw.closed:
            conn: PgConnection = held[1]
            return conn
        wrapped = PgConnection(self._connect(), self.dialect)
        self._local.held = (process.pid(), wrapped)
        return wrapped

    def writer(self) -> PostgresWriter:
        self._check_open()
        if self.readonly:
            raise StorageError(f"{self.path}: opened read-only")
        held = self._writer
        # A connection the server dropped (restart, failover) is replaced on the next batch;
        # the batch that saw it fail has already failed whole, so nothing is half-written.
        if held is not None and held[0] == process.pid() and not held[1].conn.closed:
            return held[1]
        writer = PostgresWriter(self._connect(writer=True), self.dialect, self.schema)
        self._writer = (process.pid(), writer)
        return writer

    def close(self) -> None:
        self._closed = True
        with self._lock:
            mine = [c for pid, c in self._connections if pid == process.pid()]
            self._connections.clear()
            pool, self._pool = self._pool, None
        for conn in mine:
            with contextlib.suppress(Exception):
                conn.close()
        if pool is not None and pool[0] == process.pid():
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
            return self._query(PAGE_AFTER, (after, size))

        if limit is not None and limit <= PAGE:
            return iter(fetch(after_position))
        return paged(fetch, after_position, limit)

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
        rows = self._query(HEAD, (stream_id,))
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
        """Create the schema and bring it to the newest migration (``schema``).

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

    def check_current(self, wanted: dict[str, int], oldest: int | None = None) -> int:
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
        current = oldest or LATEST
        if not current <= schema <= LATEST or any(stored.get(n) != v for n, v in wanted.items()):
            raise NeedsMigration(f"{self.path}: schema or projections are not current")
        return int(schema)


__all__ = ["PostgresStorage", "translate"]
