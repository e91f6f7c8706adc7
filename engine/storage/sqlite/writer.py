"""The SQLite backend's write side: the one writer connection of this process.

A commit first checks that the path still names the file opened (``files.FileIdentity``), and
leaves the WAL's checkpoint to the log's own thread (``engine.storage.sqlite.checkpoint``).
SQLite's data version of this connection, read once the write lock is held, stays what it was
after this connection's last commit exactly when no other connection has committed since
(ADR 0021): that is ``begin``'s answer.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import apsw

from engine import chain
from engine.storage.seam import (
    NOTHING_BUFFERED,
    Buffered,
    CommandOutcome,
    CommandRow,
    EventRow,
    HeadRow,
    WriterCapabilities,
)
from engine.storage.sqlite.checkpoint import BACKSTOP_PAGES, CHECKPOINT_PAGES, Checkpointer
from engine.storage.sqlite.files import FileIdentity
from engine.storage.streams_table import HEAD_SQL, UPSERT_SQL

COLUMNS = (
    "position, stream_id, version, event_type, recorded_at, epoch, command_id, state, payload, hash"
)
_INSERT_EVENT = "INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)"
_INSERT_COMMAND = "INSERT INTO commands VALUES (?, ?, ?, ?)"
AFTER = f"SELECT {COLUMNS} FROM events WHERE position > ? ORDER BY position"
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
# A command whose events were archived (``engine.keep.archive``): its outcome was kept aside.
_ARCHIVED_COMMAND = (
    "SELECT stream_id, first_position, last_position, first_version, last_version, last_state"
    " FROM archived_commands WHERE command_id = ?"
)
_HAS_ARCHIVE = "SELECT count(*) FROM sqlite_schema WHERE name = 'archived_commands'"


class SqliteWriter:
    """The write side on this process's writer connection (``engine.storage.seam.Writer``)."""

    # In-process BEGIN and lookups: nothing to overlap, nothing to save by asking at once.
    capabilities = WriterCapabilities()

    def __init__(
        self, conn: Any, checkpoints: Checkpointer, identity: FileIdentity | None = None
    ) -> None:
        self._conn = conn
        self._identity = identity
        self._cursor = conn.cursor()
        self._execute = self._cursor.execute
        self._version_after_commit: int | None = None
        # The WAL's size after the last commit, as its hook reports it. Setting a hook also
        # turns SQLite's checkpoint inside COMMIT off (``engine.storage.sqlite.checkpoint``).
        self._wal_pages = 0
        self._archived: bool | None = None  # whether archived_commands exists; None: ask
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
        unchanged = bool(self._conn.data_version() == self._version_after_commit)
        if not unchanged:
            self._archived = None  # another connection (an archive) may have made the table
        return unchanged

    def commit(self, buffered: Buffered = NOTHING_BUFFERED) -> None:
        rows, heads, commands = buffered
        if rows:
            _write(self._cursor, _INSERT_EVENT, rows)
        if heads:
            _write(self._cursor, UPSERT_SQL, heads)
        if commands:
            _write(self._cursor, _INSERT_COMMAND, commands)
        if self._identity is not None:
            self._identity.check_open(self._conn)
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
        rows = self._execute(HEAD_SQL, (stream_id,)).fetchall()
        return (rows[0][0], rows[0][1]) if rows else None

    def stream_heads(self, stream_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        found = {}
        for stream_id in stream_ids:
            head = self.stream_head(stream_id)
            if head is not None:
                found[stream_id] = head
        return found

    def collided(self, ex: BaseException) -> bool:
        return isinstance(ex, apsw.ConstraintError)

    def command_outcome(self, command_id: str) -> CommandOutcome | None:
        rows = self._execute(_COMMAND, (command_id,)).fetchall()
        if not rows:
            if self._archived is None:
                self._archived = bool(self._execute(_HAS_ARCHIVE).fetchall()[0][0])
            if self._archived:
                rows = self._execute(_ARCHIVED_COMMAND, (command_id,)).fetchall()
        return rows[0] if rows else None

    def insert_events(self, rows: Sequence[EventRow]) -> None:
        _write(self._cursor, _INSERT_EVENT, rows)

    def upsert_heads(self, rows: Sequence[HeadRow]) -> None:
        _write(self._cursor, UPSERT_SQL, rows)

    def insert_commands(self, rows: Sequence[CommandRow]) -> None:
        _write(self._cursor, _INSERT_COMMAND, rows)

    def rows_after(
        self, position: int, event_types: frozenset[str] | None = None
    ) -> Iterator[EventRow]:
        # A cursor of its own: the caller may write on the writer's cursor while iterating.
        # The cursor itself is the iterator: no generator frame per row on rebuilds.
        cursor = self._conn.cursor()
        if event_types is None:
            rows: Iterator[EventRow] = cursor.execute(AFTER, (position,))
            return rows
        # Rows nobody wants are skipped inside SQLite, never decoded (``json_each`` keeps
        # the statement the same for any number of types, so it stays in the cache).
        rows = cursor.execute(_AFTER_OF_TYPES, (position, json.dumps(sorted(event_types))))
        return rows


def _write(cursor: Any, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """``sql`` run for each of ``rows``. One row (a lone append's) is an ``execute``: apsw's
    ``executemany`` of one row cost 4 us more of a lone durable append's CPU (measured at FULL
    sync, where a warm loop shows no difference)."""
    if len(rows) == 1:
        cursor.execute(sql, rows[0])
    else:
        cursor.executemany(sql, rows)
