"""The SQLite backend of the storage seam: one WAL file, written and read through APSW.

Connections are opened lazily, never across fork: each thread reads on a connection of its
own, and each process writes on exactly one connection, used by whichever thread leads the
current batch (the group commit makes that use one thread at a time). One writer connection
is what lets the log keep its tail and stream heads between batches: SQLite's data version of
that connection (``SQLITE_FCNTL_DATA_VERSION``, through ``Connection.data_version``), read once
the write lock is held, stays what it was after this connection's last commit exactly when no
other connection has committed since (ADR 0021).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import apsw

from engine import chain
from engine.errors import LogMissing, NeedsMigration, NotALog, StorageError, StorageFull
from engine.schema import LATEST, migrate
from engine.sqlite_checkpoint import BACKSTOP_PAGES, CHECKPOINT_PAGES, Checkpointer
from engine.storage import CommandOutcome, CommandRow, EventRow, HeadRow
from engine.streams import StreamsProjection

Sync = Literal["full", "normal"]

# Each commit writes every page it touched to the WAL in full. Event rows are a few hundred
# bytes and one append touches four B-trees (events, its (stream_id, version) index, streams,
# commands or a read model), so 2 KiB pages halve the bytes written per commit against 4 KiB
# (measured in ADR 0009); scans and big payloads lose little.
PAGE_SIZE = 2048
COLUMNS = (
    "position, stream_id, version, event_type, recorded_at, epoch, command_id, state, payload, hash"
)
_INSERT_EVENT = "INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)"
_INSERT_COMMAND = "INSERT INTO commands VALUES (?, ?, ?, ?)"
_AFTER = f"SELECT {COLUMNS} FROM events WHERE position > ? ORDER BY position"
_AFTER_OF_TYPES = (
    f"SELECT {COLUMNS} FROM events WHERE position > ?"
    " AND event_type IN (SELECT value FROM json_each(?)) ORDER BY position"
)
_TAIL = "SELECT position, hash, epoch FROM events ORDER BY position DESC LIMIT 1"
_COMMAND = (
    "SELECT c.stream_id, c.first_position, c.last_position, f.version, l.version, l.state"
    " FROM commands c JOIN events f ON f.position = c.first_position"
    " JOIN events l ON l.position = c.last_position WHERE c.command_id = ?"
)


def translate(ex: BaseException) -> BaseException:
    """The one place apsw errors become engine errors; anything else is returned unchanged."""
    if isinstance(ex, apsw.NotADBError):
        return NotALog(f"not a SQLite database: {ex}")
    if isinstance(ex, apsw.FullError):  # SQLITE_FULL: the transaction was rolled back
        return StorageFull(f"sqlite: {type(ex).__name__}: {ex}")
    if isinstance(ex, apsw.Error):
        return StorageError(f"sqlite: {type(ex).__name__}: {ex}")
    return ex


# How often a connection asks again to switch a new file to WAL after another connection's switch
# beat it. One switch that succeeds leaves nothing to switch, so a second try is the norm; the
# rest is room for several processes opening one new file at once.
WAL_SWITCH_TRIES = 8


def use_wal(conn: Any, path: str) -> None:
    """Put the file in WAL mode (a no-op on a file already in it), waiting out another
    connection that is switching the same new file at this moment.

    Switching writes the file's header: the PRAGMA reads it, then upgrades to a write. When
    another connection holds the write lock for its own switch, SQLite answers SQLITE_BUSY at
    once instead of calling the busy handler, since a reader waiting on a writer that waits
    for that reader to finish would deadlock. So each gunicorn worker's first request, racing
    to open a log file that no one has created yet, could fail with "database is locked".
    ``BEGIN IMMEDIATE`` starts from no transaction, so it does wait in the busy handler, for
    exactly the other switch's lock; after it, the header says WAL or nobody is switching.

    Raises:
        apsw.BusyError: the other connection held its lock past the busy timeout.
        StorageError: the file stayed out of WAL mode.
    """
    for _ in range(WAL_SWITCH_TRIES):
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchall()[0][0]
        except apsw.BusyError:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            continue
        if mode != "wal":
            raise StorageError(f"{path}: SQLite kept journal mode {mode!r} instead of WAL")
        return
    raise StorageError(f"{path}: no switch to WAL after {WAL_SWITCH_TRIES} tries")


class FileIdentity:
    """The file this process writes, by device and inode, checked before every commit.

    SQLite keeps writing into a log file that was deleted, moved or replaced under an open
    connection: a ``git clean`` or ``rm -rf`` of its directory leaves a server acknowledging
    writes that no later open will ever see. A commit therefore first asks whether the path
    still names the file opened (one ``stat``, about a microsecond); once it does not, every
    later write is refused, so nothing is acknowledged into an unlinked file.
    """

    def __init__(self, path: str) -> None:
        stat = os.stat(path)
        self.path = path
        self.key = (stat.st_dev, stat.st_ino)
        self.lost: str | None = None

    def holds(self) -> bool:
        """Whether the path still names the file opened (remembering a loss for good)."""
        if self.lost is not None:
            return False
        try:
            stat = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError) as ex:
            self.lost = f"{self.path} is gone ({ex.strerror}): the log was deleted or moved"
        except OSError as ex:  # ESTALE, EIO on a network volume: passing, so not remembered
            raise StorageError(f"{self.path} cannot be checked: {ex.strerror}") from ex
        else:
            if (stat.st_dev, stat.st_ino) == self.key:
                return True
            self.lost = f"{self.path} is another file now: the log was replaced"
        logging.getLogger("foldline.log").error("%s; no more writes are taken", self.lost)
        return False

    def check(self) -> None:
        """Raises LogMissing: the path no longer names the file opened."""
        if not self.holds():
            raise LogMissing(f"{self.lost}; no more writes are taken")


class SqliteWriter:
    """The write side on this process's writer connection (see ``engine.storage``)."""

    def __init__(
        self, conn: Any, checkpoints: Checkpointer, identity: FileIdentity | None = None
    ) -> None:
        self._conn = conn
        self._identity = identity
        self._cursor = conn.cursor()
        self._execute = self._cursor.execute
        self._version_after_commit: int | None = None
        # The WAL's size after the last commit, as its hook reports it. Setting a hook also
        # turns SQLite's checkpoint inside COMMIT off (``engine.sqlite_checkpoint``).
        self._wal_pages = 0
        self._checkpoints = checkpoints
        conn.set_wal_hook(self._note_wal)

    def _note_wal(self, _conn: Any, _name: str, pages: int) -> int:
        self._wal_pages = pages
        return apsw.SQLITE_OK

    @property
    def cursor(self) -> Any:
        return self._cursor

    def begin(self) -> bool:
        self._execute("BEGIN IMMEDIATE")
        # Only meaningful once the write lock is held: the read snapshot is then the newest.
        return bool(self._conn.data_version() == self._version_after_commit)

    def commit(self) -> None:
        if self._identity is not None:
            self._identity.check()
        self._execute("COMMIT")
        self._version_after_commit = self._conn.data_version()
        if self._wal_pages >= CHECKPOINT_PAGES:
            self._checkpoint()

    def _checkpoint(self) -> None:
        checkpoints = self._checkpoints
        if checkpoints.finish_wanted or self._wal_pages >= BACKSTOP_PAGES:
            # The thread copied all but the last frames (or is far behind): copy the rest
            # here, so that the WAL starts over at the next write instead of growing.
            checkpoints.finish_wanted = False
            with contextlib.suppress(apsw.BusyError, apsw.LockedError):
                self._conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
            return
        checkpoints.request()

    def rollback(self) -> None:
        if self._conn.in_transaction:
            self._execute("ROLLBACK")
        # The database is again what this transaction found: whatever the log knew then
        # stays true until another connection commits.
        self._version_after_commit = self._conn.data_version()

    def savepoint(self) -> None:
        self._execute("SAVEPOINT work")

    def release_savepoint(self) -> None:
        self._execute("RELEASE work")

    def rollback_to_savepoint(self) -> None:
        self._execute("ROLLBACK TO work")

    def tail(self) -> tuple[int, bytes, int]:
        rows = self._execute(_TAIL).fetchall()
        if not rows:
            return 0, chain.GENESIS, 0
        position, hash_, epoch = rows[0]
        return position, hash_, epoch

    def stream_head(self, stream_id: str) -> tuple[int, str] | None:
        rows = self._execute(StreamsProjection.head_sql, (stream_id,)).fetchall()
        return (rows[0][0], rows[0][1]) if rows else None

    def command_outcome(self, command_id: str) -> CommandOutcome | None:
        rows = self._execute(_COMMAND, (command_id,)).fetchall()
        return rows[0] if rows else None

    def insert_events(self, rows: Sequence[EventRow]) -> None:
        if len(rows) == 1:
            self._execute(_INSERT_EVENT, rows[0])
        else:
            self._cursor.executemany(_INSERT_EVENT, rows)

    def upsert_heads(self, rows: Sequence[HeadRow]) -> None:
        if len(rows) == 1:
            self._execute(StreamsProjection.upsert_sql, rows[0])
        else:
            self._cursor.executemany(StreamsProjection.upsert_sql, rows)

    def insert_commands(self, rows: Sequence[CommandRow]) -> None:
        self._cursor.executemany(_INSERT_COMMAND, rows)

    def rows_after(
        self, position: int, event_types: frozenset[str] | None = None
    ) -> Iterator[EventRow]:
        # A cursor of its own: the caller may write on the writer's cursor while iterating.
        # The cursor itself is the iterator: no generator frame per row on rebuilds.
        cursor = self._conn.cursor()
        if event_types is None:
            rows: Iterator[EventRow] = cursor.execute(_AFTER, (position,))
            return rows
        # Rows nobody wants are skipped inside SQLite, never decoded (``json_each`` keeps
        # the statement the same for any number of types, so it stays in the cache).
        rows = cursor.execute(_AFTER_OF_TYPES, (position, json.dumps(sorted(event_types))))
        return rows


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

    # -- connections ---------------------------------------------------------------------

    def _open(self) -> Any:
        """A connection of this process, closed by ``close``."""
        if self._closed:
            raise StorageError(f"{self.path}: the log is closed")
        conn = self._connect()
        with self._lock:
            self._connections.append((os.getpid(), conn))
        return conn

    def _connect(self) -> Any:
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
                conn.execute(f"PRAGMA synchronous = {self.sync.upper()}")
        except apsw.Error as ex:
            raise translate(ex) from ex
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
        pid = os.getpid()
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
        pid = os.getpid()
        if held is not None and held[0] == pid:
            return held[1]
        writer = SqliteWriter(self._open(), self.checkpoints, self.identity)
        self._writer = (pid, writer)
        return writer

    def close(self) -> None:
        """Close every connection this process opened; later use raises ``StorageError``.

        A connection that another thread is using at this moment is left to that thread: its
        next call on the log fails cleanly instead (apsw refuses to close it under its feet).
        """
        self._closed = True
        self.checkpoints.stop()
        with self._lock:
            mine = [c for pid, c in self._connections if pid == os.getpid()]
            self._connections.clear()
        for conn in mine:
            with contextlib.suppress(apsw.ThreadingViolationError):
                conn.close()
        self._local = threading.local()
        self._writer = None

    # -- reads ---------------------------------------------------------------------------

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        try:
            rows: list[Any] = self.connection().execute(sql, params).fetchall()
        except apsw.Error as ex:
            raise translate(ex) from ex
        return rows

    def rows_after(self, after_position: int, limit: int | None = None) -> Iterator[EventRow]:
        if limit is not None:
            return iter(self._query(f"{_AFTER} LIMIT ?", (after_position, limit)))
        try:
            rows: Iterator[EventRow] = self.connection().cursor().execute(_AFTER, (after_position,))
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
        rows = self._query(StreamsProjection.head_sql, (stream_id,))
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
        """Bring the file to the newest schema (see ``engine.schema``)."""
        conn = self.writer()._conn
        return migrate(conn, self.path, recorded_at)

    def check_current(self, wanted: dict[str, int]) -> None:
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
        if schema != LATEST or any(stored.get(n) != v for n, v in wanted.items()):
            raise NeedsMigration(f"{self.path}: schema or projections are not current")


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


__all__ = ["COLUMNS", "PAGE_SIZE", "SqliteStorage", "Sync", "snapshot", "translate"]
