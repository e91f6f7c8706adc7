"""WAL checkpoints off the commit path: a thread of the log's own copies the WAL into the file.

SQLite's automatic checkpoint runs inside the COMMIT that pushes the WAL past 1,000 pages: that
one commit copies every page into the database file and syncs it, several milliseconds during
which the group-commit leader holds every caller of its batch, and the next batch cannot start
(ADR 0027). Here the writer connection's WAL hook only notes the WAL's size; past
``CHECKPOINT_PAGES`` a daemon thread, on a connection of its own opened with the log's sync
level, runs a PASSIVE checkpoint, which never blocks writers or readers, while the writer goes
on committing. Durability does not change: a commit is durable when its WAL frames are synced,
as before; a checkpoint only moves committed pages, and a crash in the middle of one is what
SQLite recovers from on every open.

A WAL starts over from its head (instead of growing, which makes every sync also write the
file's size) only once every frame in it has been copied, and the writer keeps adding frames
while the thread copies. So when the thread has copied all but fewer than
``CHECKPOINT_PAGES`` frames, it leaves those to the writer: after its next COMMIT the writer
checkpoints what is left (``finish_wanted``), and the WAL restarts at the next write. If the
thread falls behind (starved of CPU or disk, or a reader pins old frames), the committing
writer checkpoints itself once the WAL passes ``BACKSTOP_PAGES``, so the WAL stays bounded.
One thread per log and process: it is started on the first request, never inherited across
fork, and stopped by ``stop`` (the log's ``close``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import apsw

from engine import process
from engine.errors import StorageError

log = logging.getLogger(__name__)

# SQLite's own default threshold (SQLITE_DEFAULT_WAL_AUTOCHECKPOINT).
CHECKPOINT_PAGES = 1000
# 16x that (32 MiB of 2 KiB pages): the thread is late, the writer checkpoints itself.
BACKSTOP_PAGES = 16 * CHECKPOINT_PAGES


class Checkpointer:
    """The background checkpoints of one log file in this process."""

    def __init__(self, open_connection: Callable[[], Any]) -> None:
        self._open = open_connection
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._stopping = False
        # Set by the thread when only a few frames are left uncopied: the writer copies them.
        self.finish_wanted = False
        self.done = threading.Condition()
        self.completed = 0  # checkpoints the thread has run (tests wait on ``done``)
        self.thread_ident: int | None = None

    def request(self) -> None:
        """Ask for a checkpoint soon (the WAL has passed ``CHECKPOINT_PAGES``)."""
        if self._stopping:
            return
        if self._thread is None or self._pid != process.pid():
            self._start()
        # Every commit asks while the WAL is long; one already asked and not yet begun (the
        # thread clears the flag before it copies) needs no second lock and notify.
        if not self._wanted.is_set():
            self._wanted.set()

    def _start(self) -> None:
        with self._lock:
            if self._stopping or (self._thread is not None and self._pid == process.pid()):
                return
            self._pid = process.pid()
            self._wanted = threading.Event()  # a forked child's copy may hold the parent's
            self._thread = threading.Thread(
                target=self._run, name="foldline-checkpoint", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        self.thread_ident = threading.get_ident()
        try:
            conn = self._open()
        except (apsw.Error, StorageError) as ex:
            # The log's opener translates apsw's errors (an I/O error, a log deleted or
            # replaced): without StorageError here the thread died of an unhandled exception.
            log.warning("checkpoint thread could not open the log: %s", ex)
            return
        try:
            while True:
                self._wanted.wait()
                if self._stopping:
                    return
                self._wanted.clear()
                # Busy: another process is checkpointing; its pages are as good as ours.
                left = CHECKPOINT_PAGES
                with contextlib.suppress(apsw.BusyError, apsw.LockedError):
                    in_wal, copied = conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
                    left = in_wal - copied
                if left < CHECKPOINT_PAGES:
                    self.finish_wanted = True
                with self.done:
                    self.completed += 1
                    self.done.notify_all()
        except apsw.Error as ex:  # the writer's backstop keeps the WAL bounded without us
            log.warning("checkpoint thread stopped: %s", ex)
        finally:
            conn.close()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (after the checkpoint it is running, if any) and close its connection."""
        self._stopping = True
        thread = self._thread
        self._wanted.set()
        if (
            thread is not None
            and self._pid == process.pid()
            and thread is not threading.current_thread()
        ):
            thread.join(timeout_s)
        self._thread = None
