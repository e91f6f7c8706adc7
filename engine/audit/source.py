"""How the audit commands read a log: in place, read-only, as raw rows.

The raw commands (history, export, state, tail, diff, checkpoint) read the ``events`` table and
never decode a payload, so they need no machine declarations and work on a log of any machine.
The file is opened through a ``file:`` URI with every special character quoted (a folder named
``#1 backups`` is a path, not a URI fragment) and ``mode=ro``: nothing is ever written to it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from engine.clock import SystemClock
from engine.errors import NotALog, SchemaTooNew
from engine.log import Log
from engine.machines import Machines
from engine.projection import ProjectionSet
from engine.storage.sqlite.schema import APPLICATION_ID, LATEST
from engine.storage.sqlite.storage import SqliteStorage

COLUMNS = (
    "position, stream_id, version, event_type, recorded_at, epoch, command_id, state, payload, hash"
)
# What an event *is*, for comparing two logs: everything but the position and the chain hash.
CONTENT = ("stream_id", "version", "event_type", "recorded_at", "epoch", "command_id", "state")


def uri(path: str | os.PathLike[str]) -> str:
    """A read-only SQLite URI for a path, whatever characters it holds."""
    return f"file:{quote(os.path.abspath(os.fspath(path)))}?mode=ro"


def ranges(last: int, parts: int) -> list[tuple[int, int]]:
    """Positions 1..last cut into at most ``parts`` contiguous (first, last) ranges."""
    size = max(1, -(-last // parts))
    return [(lo, min(lo + size - 1, last)) for lo in range(1, last + 1, size)]


@dataclass
class Reader:
    """A read-only connection to one log, and what it says about itself."""

    path: str
    log: Log
    schema: int

    @property
    def storage(self) -> SqliteStorage:
        storage = self.log.storage
        assert isinstance(storage, SqliteStorage)
        return storage

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        return self.storage._query(sql, params)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> Iterator[Any]:
        """Stream a query's rows (a long scan holds one read transaction)."""
        yield from self.log.connection().cursor().execute(sql, params)

    def head(self) -> int:
        return self.log.head()

    def stream_rows(self, stream_id: str) -> Iterator[Any]:
        """One stream's raw rows (COLUMNS), by version."""
        yield from self.rows(
            f"SELECT {COLUMNS} FROM events WHERE stream_id = ? ORDER BY version", (stream_id,)
        )

    def iter_rows(self, after_position: int = 0) -> Iterator[Any]:
        return self.rows(
            f"SELECT {COLUMNS} FROM events WHERE position > ? ORDER BY position", (after_position,)
        )

    def close(self) -> None:
        self.log.close()


def open_reader(path: str | os.PathLike[str]) -> Reader:
    """Open a foldline log read-only, without machines or projections.

    Raises:
        NotALog: no such file, not SQLite, or not a foldline log.
        SchemaTooNew: written by a newer release (its rows may not mean what we think).
        StorageError: SQLite could not read it.
    """
    text = os.fspath(path)
    if not Path(text).is_file():
        raise NotALog(f"{text}: no such file")
    storage = SqliteStorage(os.path.abspath(text), "full", 10_000, readonly=True)
    log = Log(storage, Machines([]), ProjectionSet([]), SystemClock(), 1 << 20, 1)
    try:
        tables = {r[0] for r in storage._query("SELECT name FROM sqlite_schema WHERE type='table'")}
        app_id = storage._query("PRAGMA application_id")[0][0]
        if "schema_migrations" not in tables or "events" not in tables or app_id != APPLICATION_ID:
            raise NotALog(f"{text}: a SQLite database, but not a foldline log")
        schema = int(storage._query("SELECT max(number) FROM schema_migrations")[0][0] or 0)
        if schema > LATEST:
            raise SchemaTooNew(text, schema, LATEST)
    except BaseException:
        log.close()
        raise
    return Reader(text, log, schema)


@contextmanager
def reading(path: str | os.PathLike[str]) -> Iterator[Reader]:
    reader = open_reader(path)
    try:
        yield reader
    finally:
        reader.close()


def copy_log(reader: Reader, target: str | os.PathLike[str]) -> None:
    """A consistent copy of the log (``VACUUM INTO`` works on a read-only connection), for the
    one case that needs to write: an older schema that must be migrated before it is folded."""
    reader.query("VACUUM INTO ?", (os.fspath(target),))
