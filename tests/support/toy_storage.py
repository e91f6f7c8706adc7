"""A toy backend of the storage seam, made of the seam's protocols and nothing else.

It proves that a backend is ``engine.storage.seam``'s ``Storage`` and ``Writer`` alone: it
imports no other module of the engine's storage, the engine is not told about it, and the log
contract suite (``tests/contract``) runs against it as against SQLite and PostgreSQL, through
``open_log_with``.

The log itself (events, stream heads, commands, the tail, the change counter that answers
``Writer.begin``) is plain lists and dicts. The read models are not: the seam hands projections a
DB-API cursor that speaks SQLite's SQL (ADR 0022), so they live in a stdlib ``sqlite3``
database in memory. The built-in heads projection refolds from the ``events`` table in SQL,
so the writer copies each event row there too; the lists stay the log's truth for every read
the seam makes. It declares no capability (``WriterCapabilities()``), has no wake-ups of its
own (the notifier polls ``data_version``) and never loses its log.

Two storages made for one folder share one database, as two SQLite storages on one file do:
each has its own writer, and ``begin`` tells a writer whether the other committed since. A
lock held from ``begin`` to ``commit``/``rollback`` is the database's write lock. Reads of the
read models outside the writer's transaction (``content_cursor``) wait for that lock; ad-hoc
SQL on ``connection()`` gets no isolation from an open write: a toy's limit.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.chain import GENESIS
from engine.errors import NotALog, StorageError
from engine.storage.seam import (
    NOTHING_BUFFERED,
    Buffered,
    CommandOutcome,
    CommandRow,
    EventRow,
    HeadRow,
    WriterCapabilities,
)

# The tables the read models' SQL may touch besides their own: the checkpoints, and the
# copy of ``events`` the heads projection refolds from.
_SCHEMA = """
CREATE TABLE events (
    position INTEGER PRIMARY KEY, stream_id TEXT NOT NULL, version INTEGER NOT NULL,
    event_type TEXT NOT NULL, recorded_at TEXT NOT NULL, epoch INTEGER NOT NULL,
    command_id TEXT, state TEXT NOT NULL, payload BLOB NOT NULL, hash BLOB NOT NULL,
    UNIQUE (stream_id, version)
);
CREATE TABLE projections (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, checkpoint INTEGER
) WITHOUT ROWID;
"""
_INSERT_EVENT = "INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)"
_UPSERT_HEAD = (
    "INSERT INTO streams VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream_id) DO UPDATE"
    " SET version = excluded.version, state = excluded.state,"
    " last_position = excluded.last_position, updated_at = excluded.updated_at"
)


class ToyDatabase:
    """One log: what every storage of one folder shares."""

    def __init__(self) -> None:
        self.write_lock = threading.Lock()
        self.events: list[EventRow] = []  # committed, position = index + 1
        self.heads: dict[str, tuple[int, str]] = {}
        self.commands: dict[str, CommandRow] = {}
        self.changes = 0  # commits so far: the data version
        self.migrated = False
        self.sql = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)


_DATABASES: dict[str, ToyDatabase] = {}
_DATABASES_LOCK = threading.Lock()


def database(name: str) -> ToyDatabase:
    with _DATABASES_LOCK:
        found = _DATABASES.get(name)
        if found is None:
            found = _DATABASES[name] = ToyDatabase()
        return found


class ToyWriter:
    """The write side: the batch's rows pend here until ``commit`` makes them the log's."""

    capabilities = WriterCapabilities()

    def __init__(self, db: ToyDatabase) -> None:
        self._db = db
        self._cursor = db.sql.cursor()
        self._open = False
        self._changes_after_commit: int | None = None
        self._events: list[EventRow] = []
        self._heads: dict[str, tuple[int, str]] = {}
        self._commands: dict[str, CommandRow] = {}
        self._marks: list[tuple[int, dict[str, tuple[int, str]], dict[str, CommandRow]]] = []

    @property
    def cursor(self) -> Any:
        return self._cursor

    def begin(self) -> bool:
        self._db.write_lock.acquire()
        self._open = True
        self._events, self._heads, self._commands, self._marks = [], {}, {}, []
        self._cursor.execute("BEGIN")
        return self._db.changes == self._changes_after_commit

    def commit(self, buffered: Buffered = NOTHING_BUFFERED) -> None:
        rows, heads, commands = buffered
        self.insert_events(rows)
        self.upsert_heads(heads)
        self.insert_commands(commands)
        db = self._db
        self._cursor.execute("COMMIT")
        db.events.extend(self._events)
        db.heads.update(self._heads)
        db.commands.update(self._commands)
        db.changes += 1
        self._changes_after_commit = db.changes
        self._close()

    def rollback(self) -> None:
        if not self._open:
            return
        if self._db.sql.in_transaction:
            self._cursor.execute("ROLLBACK")
        # The log is again what this transaction found: what the cache knew stays true.
        self._changes_after_commit = self._db.changes
        self._close()

    def _close(self) -> None:
        self._events, self._heads, self._commands, self._marks = [], {}, {}, []
        self._open = False
        self._db.write_lock.release()

    def savepoint(self) -> None:
        self._marks.append((len(self._events), dict(self._heads), dict(self._commands)))
        self._cursor.execute("SAVEPOINT work")

    def release_savepoint(self) -> None:
        self._marks.pop()
        self._cursor.execute("RELEASE work")

    def rollback_to_savepoint(self) -> None:
        count, heads, commands = self._marks[-1]
        del self._events[count:]
        self._heads, self._commands = dict(heads), dict(commands)
        self._cursor.execute("ROLLBACK TO work")

    def _all_events(self) -> list[EventRow]:
        return self._db.events + self._events

    def tail(self) -> tuple[int, bytes, int]:
        events = self._events or self._db.events
        if not events:
            return 0, GENESIS, 0
        last = events[-1]
        return last[0], last[9], last[5]

    def stream_head(self, stream_id: str) -> tuple[int, str] | None:
        return self._heads.get(stream_id) or self._db.heads.get(stream_id)

    def stream_heads(self, stream_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        return {s: head for s in stream_ids if (head := self.stream_head(s)) is not None}

    def collided(self, ex: BaseException) -> bool:
        return False  # never asked: the toy does not read heads at once

    def command_outcome(self, command_id: str) -> CommandOutcome | None:
        row = self._commands.get(command_id) or self._db.commands.get(command_id)
        if row is None:
            return None
        _, stream_id, first, last = row
        events = self._all_events()
        first_row, last_row = events[first - 1], events[last - 1]
        return stream_id, first, last, first_row[2], last_row[2], last_row[7]

    def insert_events(self, rows: Sequence[EventRow]) -> None:
        if not rows:
            return
        # The backstops a database's keys would be: positions follow the tail, one event
        # per stream and version.
        if rows[0][0] != self.tail()[0] + 1:
            raise StorageError(f"toy: append at position {rows[0][0]} after {self.tail()[0]}")
        self._cursor.executemany(_INSERT_EVENT, [tuple(row) for row in rows])
        self._events.extend(rows)

    def upsert_heads(self, rows: Sequence[HeadRow]) -> None:
        if not rows:
            return
        self._cursor.executemany(_UPSERT_HEAD, [tuple(row) for row in rows])
        for row in rows:
            self._heads[row[0]] = (row[2], row[3])

    def insert_commands(self, rows: Sequence[CommandRow]) -> None:
        for row in rows:
            if row[0] in self._commands or row[0] in self._db.commands:
                raise StorageError(f"toy: command {row[0]!r} recorded twice")
            self._commands[row[0]] = row

    def rows_after(
        self, position: int, event_types: frozenset[str] | None = None
    ) -> Iterator[EventRow]:
        rows = self._all_events()[position:]
        if event_types is None:
            return iter(rows)
        return (row for row in rows if row[3] in event_types)


class ToyStorage:
    """The log of one folder: its reads outside the write transaction, and its writer."""

    readonly = False

    def __init__(self, folder: Path | str) -> None:
        self.path = f"toy:{folder}"
        self._db = database(str(folder))
        self._writer: ToyWriter | None = None
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"{self.path}: the log is closed")

    def writer(self) -> ToyWriter:
        self._check_open()
        if self._writer is None:
            self._writer = ToyWriter(self._db)
        return self._writer

    def connection(self) -> Any:
        self._check_open()
        return self._db.sql

    def translate(self, ex: BaseException) -> BaseException:
        if isinstance(ex, sqlite3.Error):
            return StorageError(f"toy: {type(ex).__name__}: {ex}")
        return ex

    def rows_after(self, after_position: int, limit: int | None = None) -> Iterator[EventRow]:
        self._check_open()
        end = None if limit is None else after_position + limit
        return iter(self._db.events[after_position:end])

    def stream_rows(self, stream_id: str, after_version: int) -> list[EventRow]:
        self._check_open()
        return [r for r in self._db.events if r[1] == stream_id and r[2] > after_version]

    def hash_at(self, position: int) -> bytes | None:
        events = self._db.events
        return events[position - 1][9] if 0 < position <= len(events) else None

    def max_position(self) -> int:
        self._check_open()
        return len(self._db.events)

    def stream_head(self, stream_id: str) -> tuple[int, str] | None:
        self._check_open()
        return self._db.heads.get(stream_id)

    def data_version(self) -> int:
        self._check_open()
        return self._db.changes

    @contextlib.contextmanager
    def content_cursor(self) -> Iterator[Any]:
        self._check_open()
        with self._db.write_lock:  # nobody writes meanwhile: one consistent snapshot
            yield self._db.sql.cursor()

    def wakeups(self) -> None:
        return None

    def lost(self) -> str | None:
        return None

    def migrate(self, recorded_at: str) -> int:
        self._check_open()
        with self._db.write_lock:
            if not self._db.migrated:
                self._db.sql.executescript(_SCHEMA)
                self._db.migrated = True
        return 1

    def check_current(self, wanted: dict[str, int], oldest: int | None = None) -> int:
        if not self._db.migrated:
            raise NotALog(f"{self.path}: no log here")
        return 1  # one schema, ever: current whatever ``oldest`` allows

    def close(self) -> None:
        self._closed = True
        self._writer = None


def toy_storage(folder: Path) -> ToyStorage:
    """A fresh toy log for ``folder`` (``tests.support.backends``' signature)."""
    return ToyStorage(folder)
