"""The file under a SQLite log: switching it to WAL, and noticing that it was replaced.

Both guard the same thing from two ends: that every process writes one real file in WAL mode,
the one it opened (ADR 0028, ADR 0029).
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Any

import apsw

from engine.errors import LogMissing, StorageError

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

    The writer asks through its connection (``check_open``): SQLite stats the path it opened
    and compares inode numbers (``SQLITE_FCNTL_HAS_MOVED``), which costs the system call and
    nothing else, where ``os.stat`` also builds a Python stat result of some twenty fields
    (a durable append ran 137,000 instructions with ``os.stat`` and 130,800 with this, counted
    by callgrind). Only a
    file SQLite finds moved, or a file system SQLite cannot ask, is looked at again here,
    where the device is compared too and the reason is told.
    """

    def __init__(self, path: str) -> None:
        stat = os.stat(path)
        self.path = path
        self.key = (stat.st_dev, stat.st_ino)
        self.lost: str | None = None
        # Where SQLite answers HAS_MOVED: used by the writer only, under the group's lead.
        self._moved = ctypes.c_int(0)
        self._moved_at = ctypes.addressof(self._moved)

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

    def check_open(self, conn: Any) -> None:
        """``check``, asked first of ``conn``, an open connection to this file.

        Raises:
            LogMissing: the path no longer names the file opened.
        """
        if (
            self.lost is None  # a loss is for good, even if the file comes back
            and conn.file_control("main", apsw.SQLITE_FCNTL_HAS_MOVED, self._moved_at)
            and not self._moved.value
        ):
            return
        self.check()
