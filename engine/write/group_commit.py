"""Group commit: concurrent writers of one process share one transaction and one sync.

Callers queue their work; the first caller to find nobody leading becomes the leader, takes
the queue (up to ``max_batch``) and runs it as one batch through ``run_batch``, which asks for
the batch (``gather``) when it is ready for it; everybody in
the batch is woken after it returns, that is after the single COMMIT. A caller that queued
while a batch was committing is handed the leadership of the next batch. Backend-neutral: the
batch itself (one transaction, one scope per caller) is ``engine.write.batch.run_batch``.

Each waiter blocks on a lock of its own rather than on a shared condition, so waking a batch
of N costs N lock releases and nothing else. A leader whose last batch had N > 1 callers
lingers (at most as long as that batch took, and never over ``MAX_LINGER_S``) until N have
queued again: the writers woken by the last commit are still on their way back, and without
the wait they split into two half-size batches (ADR 0021). A lone writer never waits, and
need not queue at all: ``try_lead_alone`` gives it the lead on the same terms, and
``hand_over`` passes it on after (``engine.write.lone.append_now``, ADR 0066).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from engine.process import pid

_allocate_lock = threading.Lock
MAX_LINGER_S = 0.002


class Request:
    """One caller's unit of work and, once the batch is done, its outcome."""

    __slots__ = ("error", "expected", "lead", "plain", "result", "stream_id", "wake", "work")

    def __init__(
        self,
        work: Callable[[Any], Any],
        stream_id: str | None = None,
        expected: int | None = None,
        plain: Any = None,
    ) -> None:
        self.work = work
        # The stream the work appends to, when the caller knows it: the batch reads the heads
        # of all its streams at once (``engine.write.batch.run_batch``).
        self.stream_id = stream_id
        # Set for a plain ``Log.append`` only: its expected version. Such a work appends and
        # does nothing else, so the batch may run it again; and one at 0 says its stream is
        # new, which a batch of them may take on trust (``Transaction.read_heads``).
        self.expected = expected
        # A plain ``Log.append`` without a command id: its arguments, for a batch of it alone
        # to run without the transaction's scopes (``engine.write.lone``).
        self.plain = plain
        self.wake: Any = None  # a held lock, made only for a caller that has to wait
        self.lead = False
        self.result: Any = None
        self.error: BaseException | None = None


class GroupCommit:
    """The queue and the leader hand-over. Thread-safe; reset in a forked child."""

    def __init__(
        self, run_batch: Callable[[Callable[[], list[Request]]], None], max_batch: int
    ) -> None:
        self._run_batch = run_batch
        self.max_batch = max_batch
        self._reset()

    def _reset(self) -> None:
        self._pid = pid()
        self._queue: list[Request] = []
        self._lock = threading.Lock()
        self._leading = False
        self._last_batch = 0
        self._last_seconds = 0.0
        # While a leader lingers for the rest of its batch: the lock it waits on, and the
        # queue length that releases it.
        self._filled: Any = None
        self._target = 0

    def submit(
        self,
        work: Callable[[Any], Any],
        stream_id: str | None = None,
        expected: int | None = None,
        plain: Any = None,
    ) -> Any:
        """Run ``work`` in the next batch; returns its result (or raises its error) after the
        batch's commit. ``stream_id``: the stream ``work`` will append to, if known;
        ``expected``, ``plain``: see ``Request``."""
        if self._pid != pid():
            self._reset()
        request = Request(work, stream_id, expected, plain)
        alone = False
        with self._lock:
            lead = not self._leading
            if lead:
                self._leading = True
                # Nobody waits, and nobody is on the way back from a batch to linger for.
                alone = not self._queue and self._last_batch < 2
            if not alone:
                self._queue.append(request)
            if not lead:
                request.wake = _allocate_lock()
                request.wake.acquire()
                if self._filled is not None and len(self._queue) >= self._target:
                    self._filled.release()
                    self._filled = None
        if alone:
            self._lead_alone(request)
        else:
            if not lead:
                request.wake.acquire()  # released by the leader: done, or lead the next batch
                lead = request.lead
            if lead:
                self._lead()
        if request.error is not None:
            raise request.error
        return request.result

    def _linger(self) -> None:
        """Wait, at most as long as the last batch took, for as many callers as it had.

        Writers that were woken by the last commit are still queueing again; without the
        wait the next batch takes whoever queued first, and the rest pay for a commit of
        their own. The caller that fills the batch ends the wait at once."""
        expected = self._last_batch
        if expected < 2:
            return
        with self._lock:
            if len(self._queue) >= expected:
                return
            filled = self._filled = _allocate_lock()
            filled.acquire()
            self._target = expected
        filled.acquire(timeout=min(self._last_seconds, MAX_LINGER_S))
        with self._lock:
            self._filled = None

    def _lead_alone(self, request: Request) -> None:
        """``_lead`` for a caller that found nobody leading, nobody queued and a last batch of
        one caller at most (``_linger`` would not wait): its batch is itself, taken from no
        queue. Whoever queued meanwhile leads the next batch, as after ``_lead``."""
        batch = [request]
        self._last_batch = 1
        try:
            self._run_batch(lambda: batch)
        finally:
            self.hand_over()

    def try_lead_alone(self) -> bool:
        """Take the lead as ``submit`` does for a caller alone (nobody leading, nobody queued,
        a last batch of one caller at most), without a ``Request``: the caller then uses the
        writer itself and must call ``hand_over`` after. False: somebody leads or waits."""
        if self._pid != pid():
            self._reset()
        with self._lock:
            if self._leading or self._queue or self._last_batch >= 2:
                return False
            self._leading = True
        self._last_batch = 1
        return True

    def hand_over(self) -> None:
        """End a lead (``try_lead_alone``'s, or a batch's): whoever queued meanwhile leads the
        next batch."""
        with self._lock:
            if self._queue:
                successor = self._queue[0]
                successor.lead = True
                successor.wake.release()
            else:
                self._leading = False

    def _lead(self) -> None:
        taken: list[Request] = []

        def gather() -> list[Request]:
            """The batch: whoever has queued once the linger is over (the same list on every
            call). ``run_batch`` calls it when it is ready for its works, so that what it does
            before (a round trip that opens the transaction) overlaps the callers' queueing."""
            if not taken:
                self._linger()
                with self._lock:
                    taken.extend(self._queue[: self.max_batch])
                    del self._queue[: self.max_batch]
                    self._last_batch = len(taken)
            return taken

        started = time.perf_counter()
        try:
            self._run_batch(gather)
        finally:
            self._last_seconds = time.perf_counter() - started
            batch = gather()
            self.hand_over()
            for request in batch:
                if request.wake is not None and request.wake.locked():
                    request.wake.release()
