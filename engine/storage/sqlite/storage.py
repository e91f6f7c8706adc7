"""The SQLite backend of the storage seam: one WAL file, written and read through APSW.

Connections are opened lazily, never across fork: each thread reads on a connection of its
own, and each process writes on exactly one connection, used by whichever thread leads the
current batch (the group commit makes that use one thread at a time). One writer connection
is what lets the log keep its tail and stream heads between batches: SQLite's data version of
that connection (``SQLITE_FCNTL_DATA_VERSION``, through ``Connection.data_version``), read once
the write lock is held, stays what it was after this connection's last commit exactly when no
other connection has committed since (ADR 0021).

This module is the file's connections, its reads outside the write transaction and its
opening; the writer is ``writer``, the file's guards ``files`` and the WAL's checkpoint thread
``checkpoint`` (modules of ``engine.storage.sqlite``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import apsw

from engine import process
from engine.errors import NeedsMigration, NotALog, StorageError, StorageFull
from engine.storage.durable import fsync_parent
from engine.storage.seam import EventRow, Sync
from engine.storage.sqlite.checkpoint import Checkpointer
from engine.storage.sqlite.files import FileIdentity, use_wal
from engine.storage.sqlite.schema import LATEST, migrate
from engine.storage.sqlite.writer import AFTER, COLUMNS, SqliteWriter
from engine.storage.streams_table import HEAD_SQL

# Each commit writes every page it touched to the WAL in full. Event rows are a few hundred
# bytes and one append touches four B-trees (events, its (stream_id, version) index, streams,
# commands or a read model), so 2 KiB pages halve the bytes written per commit against 4 KiB
# (measured in ADR 0009); scans and big payloads lose little.
PAGE_SIZE = 2048


def translate(ex: BaseException) -> BaseException:
    """The one place apsw errors become engine errors; anything else is returned unchanged."""
    if isinstance(ex, apsw.NotADBError):
        return NotALog(f"not a SQLite database: {ex}")
    if isinstance(ex, apsw.FullError):  # SQLITE_FULL: the transaction was rolled back
        return StorageFull(f"sqlite: {type(ex).__name__}: {ex}")
    if isinstance(ex, apsw.Error):
        return StorageError(f"sqlite: {type(ex).__name__}: {ex}")
    return ex


class SqliteStorage:
    """One log file: per-thread read connections, one writer connection per process."""

    def __init__(
        self, path: str, sync: Sync, busy_timeout_ms: int, *, readonly: bool = False
    ) -> None:
        self.path = path
        self.sync = sync
        self.busy_timeout_ms = busy_timeout_ms
        self.readonly = readonly
        self._closed = False
        self._local = threading.local()
        self._connections: list[tuple[int, Any]] = []
        self._lock = threading.Lock()
        self._writer: tuple[int, SqliteWriter] | None = None
        self.checkpoints = Checkpointer(self._connect)
        # Taken at this process's first open of the file; later opens never create one.
        self.identity: FileIdentity | None = None

    translate = staticmethod(translate)

    def wakeups(self) -> None:
        """None: commits elsewhere are noticed by polling ``data_version`` (``engine.notifier``)."""
        return None

    def lost(self) -> str | None:
        """Why the file can no longer be written: deleted, moved or replaced (ADR 0029)."""
        identity = self.identity
        if identity is None or identity.holds():
            return None
        return str(identity.lost)

    # -- connections ---------------------------------------------------------------------

    def _open(self) -> Any:
        """A connection of this process, closed by ``close``."""
        if self._closed:
            raise StorageError(f"{self.path}: the log is closed")
        conn = self._connect()
        with self._lock:
            self._connections.append((process.pid(), conn))
        return conn

    def _connect(self) -> Any:
        conn: Any = None
        try:
            if self.readonly:
                conn = apsw.Connection(
                    f"file:{quote(self.path)}?mode=ro",
                    flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
                )
                conn.set_busy_timeout(self.busy_timeout_ms)
            elif self.identity is not None:
                # The file exists (this process opened it): a connection that would create an
                # empty one where it vanished must fail instead.
                self.identity.check()
                conn = apsw.Connection(self.path, flags=apsw.SQLITE_OPEN_READWRITE)
                conn.set_busy_timeout(self.busy_timeout_ms)
                conn.execute(f"PRAGMA synchronous = {self.sync.upper()}")
            else:
                conn = apsw.Connection(self.path)
                conn.set_busy_timeout(self.busy_timeout_ms)
                # Only takes effect when the file is created (before WAL is switched on).
                conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                if self.path != ":memory:":  # a scratch log: SQLite keeps its journal in memory
                    use_wal(conn, self.path)
                    self.identity = FileIdentity(self.path)
                    # SQLite syncs the directory of a new WAL, not of a new database file:
                    # without this a power cut can take the file's name, and with a file
                    # gone SQLite drops its WAL, acknowledged commits and all (ADR 0055).
                    fsync_parent(self.path)
                conn.execute(f"PRAGMA synchronous = {self.sync.upper()}")
        except BaseException as ex:
            if conn is not None:
                # Made, then failed (an I/O error at its first statement): closed here, or
                # its descriptor and locks would last until the garbage collector's turn.
                with contextlib.suppress(apsw.Error):
                    conn.close()
            if isinstance(ex, apsw.Error):
                raise translate(ex) from ex
            if isinstance(ex, OSError) and not isinstance(ex, StorageError):
                # The directory sync failed: nothing may be acknowledged in this file.
                raise StorageError(f"{self.path}: its directory cannot be synced: {ex}") from ex
            raise
        return conn

    def connection(self) -> Any:
        """This thread's read connection, opened on first use in this process.

        ``:memory:`` (a scratch log, such as the verifier's refold) is one database per
        connection, so there every thread reads on the writer's connection: its SQL sees the
        tables the log migrated and installed.
        """
        if self._closed:
            raise StorageError(f"{self.path}: the log is closed")
        if self.path == ":memory:" and not self.readonly:
            return self.writer()._conn
        held = getattr(self._local, "held", None)
        pid = process.pid()
        if held is not None and held[0] == pid:
            return held[1]
        conn = self._open()
        self._local.held = (pid, conn)
        return conn

    def writer(self) -> SqliteWriter:
        if self._closed:
            raise StorageError(f"{self.path}: the log is closed")
        if self.readonly:
            raise StorageError(f"{self.path}: opened read-only")
        held = self._writer
        pid = process.pid()
        if held is not None and held[0] == pid:
            return held[1]
        writer = SqliteWriter(self._open(), self.checkpoints, self.identity)
        self._writer = (pid, writer)
        return writer

    def close(self) -> None:
        """Close every connection this process opened; later use raises ``StorageError``.

        A connection that another thread is using at this moment is left to that thread: its
        next call on the log fails cleanly instead (apsw refuses to close it under its feet).

        Raises:
            StorageError: a connection's close failed (an I/O error); every other one is
                closed all the same.
        """
        self._closed = True
        self.checkpoints.stop()
        with self._lock:
            mine = [c for pid, c in self._connections if pid == process.pid()]
            self._connections.clear()
        failure: apsw.Error | None = None
        for conn in mine:
            try:
                conn.close()
            except apsw.ThreadingViolationError:
                pass
            except apsw.Error as ex:
                # An I/O error in one close (its checkpoint): the rest are closed all the
                # same, or their descriptors and locks would outlive the log.
                failure = failure or ex
        self._local = threading.local()
        self._writer = None
        if failure is not None:
            raise translate(failure) from failure

    # -- reads ---------------------------------------------------------------------------

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        try:
            rows: list[Any] = self.connection().execute(sql, params).fetchall()
        except apsw.Error as ex:
            raise translate(ex) from ex
        return rows

    def rows_after(self, after_position: int, limit: int | None = None) -> Iterator[EventRow]:
        if limit is not None:
            return iter(self._query(f"{AFTER} LIMIT ?", (after_position, limit)))
        try:
            rows: Iterator[EventRow] = self.connection().cursor().execute(AFTER, (after_position,))
        except apsw.Error as ex:
            raise translate(ex) from ex
        return rows

    def stream_rows(self, stream_id: str, after_version: int) -> list[EventRow]:
        return self._query(
            f"SELECT {COLUMNS} FROM events WHERE stream_id = ? AND version > ? ORDER BY version",
            (stream_id, after_version),
        )

    def hash_at(self, position: int) -> bytes | None:
        rows = self._query("SELECT hash FROM events WHERE position = ?", (position,))
        return bytes(rows[0][0]) if rows else None

    def max_position(self) -> int:
        return int(self._query("SELECT coalesce(max(position), 0) FROM events")[0][0])

    def stream_head(self, stream_id: str) -> tuple[int, str] | None:
        rows = self._query(HEAD_SQL, (stream_id,))
        return (rows[0][0], rows[0][1]) if rows else None

    def data_version(self) -> int:
        """``PRAGMA data_version`` on this thread's connection: it changes whenever another
        connection (any process, or this process's writer) commits."""
        return int(self._query("PRAGMA data_version")[0][0])

    @contextlib.contextmanager
    def content_cursor(self) -> Iterator[Any]:
        cur = self.connection().cursor()
        cur.execute("BEGIN")
        try:
            yield cur
        finally:
            cur.execute("COMMIT")

    # -- opening -------------------------------------------------------------------------

    def migrate(self, recorded_at: str) -> int:
        """Bring the file to the newest schema (see ``engine.storage.sqlite.schema``)."""
        conn = self.writer()._conn
        return migrate(conn, self.path, recorded_at)

    def check_current(self, wanted: dict[str, int], oldest: int | None = None) -> int:
        conn = self.connection()
        try:
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")
            }
            if "schema_migrations" not in tables:
                raise NotALog(f"{self.path}: not a foldline log")
            schema = conn.execute("SELECT max(number) FROM schema_migrations").fetchall()[0][0]
            stored = dict(
                conn.execute(
                    "SELECT name, version FROM projections WHERE checkpoint IS NULL"
                ).fetchall()
            )
        except apsw.Error as ex:
            raise translate(ex) from ex
        current = oldest or LATEST
        if not current <= schema <= LATEST or any(stored.get(n) != v for n, v in wanted.items()):
            raise NeedsMigration(f"{self.path}: schema or projections are not current")
        return int(schema)


def snapshot(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Copy a log consistently (SQLite's backup API) without writing to the source: audits
    work on the copy, so they can migrate and refold it while the inputs stay untouched.

    Raises:
        NotALog: the source is not a SQLite database.
        StorageError: it could not be read.
    """
    if not Path(source).is_file():
        raise NotALog(f"{os.fspath(source)}: no such file")
    try:
        src = apsw.Connection(
            f"file:{os.fspath(source)}?mode=ro",
            flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
        )
        dst = apsw.Connection(os.fspath(target))
        with dst.backup("main", src, "main") as backup:
            backup.step()
        dst.close()
        src.close()
    except apsw.Error as ex:
        raise translate(ex) from ex


__all__ = ["COLUMNS", "PAGE_SIZE", "SqliteStorage", "snapshot", "translate"]
