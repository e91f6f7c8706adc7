"""Group commit: concurrent writers of one process share one transaction and one sync.

Callers queue their work; the first caller to find nobody leading becomes the leader, takes
the queue (up to ``max_batch``) and runs it as one batch through ``run_batch``; everybody in
the batch is woken after it returns, that is after the single COMMIT. A caller that queued
while a batch was committing is handed the leadership of the next batch. Backend-neutral: the
batch itself (one transaction, one scope per caller) is ``engine.transaction.run_batch``.

Each waiter blocks on a lock of its own rather than on a shared condition, so waking a batch
of N costs N lock releases and nothing else.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

_allocate_lock = threading.Lock


class Request:
    """One caller's unit of work and, once the batch is done, its outcome."""

    __slots__ = ("error", "lead", "result", "wake", "work")

    def __init__(self, work: Callable[[Any], Any]) -> None:
        self.work = work
        self.wake: Any = None  # a held lock, made only for a caller that has to wait
        self.lead = False
        self.result: Any = None
        self.error: BaseException | None = None


class GroupCommit:
    """The queue and the leader hand-over. Thread-safe; reset in a forked child."""

    def __init__(self, run_batch: Callable[[list[Request]], None], max_batch: int) -> None:
        self._run_batch = run_batch
        self.max_batch = max_batch
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._queue: list[Request] = []
        self._lock = threading.Lock()
        self._leading = False
        self._last_batch = 0

    def submit(self, work: Callable[[Any], Any]) -> Any:
        """Run ``work`` in the next batch; returns its result (or raises its error) after the
        batch's commit."""
        if self._pid != os.getpid():
            self._reset()
        request = Request(work)
        with self._lock:
            self._queue.append(request)
            lead = not self._leading
            if lead:
                self._leading = True
            else:
                request.wake = _allocate_lock()
                request.wake.acquire()
        if not lead:
            request.wake.acquire()  # released by the leader: done, or lead the next batch
            lead = request.lead
        if lead:
            self._lead()
        if request.error is not None:
            raise request.error
        return request.result

    def _lead(self) -> None:
        if self._last_batch > 1 and len(self._queue) < self._last_batch:
            # Writers are concurrent but some have not queued yet (they are still being woken
            # from the last commit). Yield the GIL once so they can join this batch instead of
            # each paying for a commit of their own.
            time.sleep(0)
        with self._lock:
            batch = self._queue[: self.max_batch]
            del self._queue[: self.max_batch]
            self._last_batch = len(batch)
        try:
            self._run_batch(batch)
        finally:
            with self._lock:
                if self._queue:
                    successor = self._queue[0]
                    successor.lead = True
                    successor.wake.release()
                else:
                    self._leading = False
            for request in batch:
                if request.wake is not None and request.wake.locked():
                    request.wake.release()
