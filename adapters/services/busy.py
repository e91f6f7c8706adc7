"""Whether the server is busy, across all its gunicorn workers: what AgentCore's ``/ping`` says.

AgentCore stops an idle session's microVM and trusts ``/ping`` to say ``HealthyBusy`` while work
is in flight. Any worker may answer a ping, and a run or notify hook lives in the worker that
started it, so the answer must be the server's, not the answering worker's (ADR 0031).

The board is a small page of shared memory made by the gunicorn master before it forks: one
slot per worker (its pid, start token and how much work it has in flight) and a header with
the server-wide state and when it last changed (restamped only when it changes: AgentCore reads
a moving stamp as activity). A worker counts its work in and out under one lock shared by
every process of the server; a ping reads the slots under the same lock, first clearing the
slot of a worker that died (a ``kill -9`` never leaves the server busy for good). The lock is
a POSIX record lock on a file every worker inherits, which the kernel lets go of when its
holder dies, so a worker killed inside it cannot stall the others' pings and dispatches.
Nothing here touches the log: ``/ping`` stays lazy (design.md §4.2).
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

from adapters.system.processes import is_alive, start_token

_HEADER = struct.Struct("=dq")  # when the state last changed (epoch seconds), busy (0/1)
_SLOT = struct.Struct("=qqq")  # pid, start token, work in flight
SLOTS = 128  # workers, respawned ones included (a dead worker's slot is taken again)


class BusyBoard:
    """Work in flight per worker process, shared by every process forked after it is made."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock  # the stamp's (tests give a fixed one)
        self._threads = threading.Lock()  # record locks do not exclude a process's threads
        # The lock's file: unlinked at once, its descriptor inherited by every worker.
        self._fd, name = tempfile.mkstemp(prefix="foldline-busy-")
        os.unlink(name)
        # Anonymous and MAP_SHARED: the same page in the master and every forked worker.
        self._page = mmap.mmap(-1, _HEADER.size + SLOTS * _SLOT.size)
        _HEADER.pack_into(self._page, 0, clock(), 0)
        self._mine: tuple[int, int] | None = None  # (pid, slot) of this process

    # -- counting work in and out ------------------------------------------------------------

    def enter(self) -> None:
        """A run or notify hook of this process started."""
        self._add(1)

    def leave(self) -> None:
        """A run or notify hook of this process ended."""
        self._add(-1)

    def _add(self, delta: int) -> None:
        with self._locked():
            slot = self._slot()
            pid, token, count = _SLOT.unpack_from(self._page, _offset(slot))
            _SLOT.pack_into(self._page, _offset(slot), pid, token, max(0, count + delta))
            self._settle()

    # -- reading -----------------------------------------------------------------------------

    def state(self) -> tuple[bool, float]:
        """Whether any live worker has work in flight, and when that last changed (never
        earlier than the previous answer)."""
        with self._locked():
            for slot in range(SLOTS):
                pid, token, count = _SLOT.unpack_from(self._page, _offset(slot))
                if pid and count and not is_alive(pid, str(token)):
                    _SLOT.pack_into(self._page, _offset(slot), 0, 0, 0)  # a dead worker's
            return self._settle()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._threads:
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def _settle(self) -> tuple[bool, float]:
        """Bring the header in line with the slots (under the lock); returns it."""
        changed_at, was_busy = _HEADER.unpack_from(self._page, 0)
        busy = any(_SLOT.unpack_from(self._page, _offset(slot))[2] > 0 for slot in range(SLOTS))
        if busy != bool(was_busy):
            changed_at = max(changed_at, self._clock())  # a clock stepped back cannot undo it
            _HEADER.pack_into(self._page, 0, changed_at, int(busy))
        return busy, changed_at

    def _slot(self) -> int:
        """This process's slot, claimed on first use (under the lock)."""
        pid = os.getpid()
        if self._mine is not None and self._mine[0] == pid:
            return self._mine[1]
        token = int(start_token(pid) or 0)
        free = None
        for slot in range(SLOTS):
            owner, owner_token, _ = _SLOT.unpack_from(self._page, _offset(slot))
            if (owner, owner_token) == (pid, token):
                free = slot
                break
            if free is None and (owner == 0 or not is_alive(owner, str(owner_token))):
                free = slot
        if free is None:
            raise RuntimeError(f"the busy board has no free slot for worker {pid}")
        _SLOT.pack_into(self._page, _offset(free), pid, token, 0)
        self._mine = (pid, free)
        return free


def _offset(slot: int) -> int:
    return _HEADER.size + slot * _SLOT.size
