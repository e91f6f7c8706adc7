"""Refusals on the record (ADR 0065): each refused spawn, control and integrate written to its
session's audit stream, a burst of identical ones coalesced.

Coalescing, per server process: a refusal whose key (session, action, control, code, reason,
caller, target) was recorded less than ``WINDOW_S`` ago is only counted; a timer records the count
as one ``audit.repeated`` when the window closes, and a new window starts then, so a key
writes at most one event per window however hard it is hammered. A count still waiting when
the process ends is lost (at most one window's): the first refusal of every burst is always
on the record. Each gunicorn worker coalesces its own.

A write that fails (the lease elsewhere, a full disk) is logged and dropped: the refusal's
answer stands, and the audit never blocks or changes what it records.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from engine.domain.refusals import RecordRefusal
from engine.errors import EngineError

log = logging.getLogger("foldline.refusals")

WINDOW_S = 10.0
MAX_KEYS = 4096  # windows kept in memory; the oldest closed ones go first

Key = tuple[str, str, str, str, str, str, str]


def key_of(refusal: RecordRefusal) -> Key:
    reason = refusal.limits.get("reason", "")
    return (
        refusal.session_id,
        refusal.action,
        refusal.control,
        refusal.code,
        reason,
        refusal.caller,
        refusal.target,
    )


@dataclass
class _Window:
    opened: float
    first: RecordRefusal
    count: int = 0
    timer: threading.Timer | None = field(default=None, repr=False)


class RefusalRecorder:
    """Writes refusals through ``write`` (which takes the lease and handles the command),
    coalescing bursts. Thread-safe."""

    def __init__(
        self,
        write: Callable[[RecordRefusal], object],
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write, self._window_s, self._clock = write, window_s, clock
        self._lock = threading.Lock()
        self._windows: dict[Key, _Window] = {}

    def record(self, refusal: RecordRefusal) -> None:
        """The first refusal of its key in a window is written now; the others are counted."""
        key, now = key_of(refusal), self._clock()
        with self._lock:
            window = self._windows.get(key)
            if window is not None and now - window.opened < self._window_s:
                window.count += 1
                if window.timer is None:
                    delay = self._window_s - (now - window.opened)
                    window.timer = threading.Timer(delay, self._close, (key,))
                    window.timer.daemon = True
                    window.timer.start()
                return
            self._windows[key] = _Window(now, refusal)
            self._forget_closed(now)
        self._send(refusal)

    def _close(self, key: Key) -> None:
        with self._lock:
            window = self._windows.get(key)
            if window is None or not window.count:
                return
            if window.timer is not None:
                window.timer.cancel()
            count, first = window.count, window.first
            # A new window opens now: at most one audit.repeated per key and window.
            window.count, window.timer, window.opened = 0, None, self._clock()
        self._send(msgspec.structs.replace(first, count=count))

    def _forget_closed(self, now: float) -> None:
        if len(self._windows) <= MAX_KEYS:
            return
        for key in [k for k, w in self._windows.items() if now - w.opened >= self._window_s]:
            del self._windows[key]

    def _send(self, refusal: RecordRefusal) -> None:
        try:
            self._write(refusal)
        except EngineError as ex:
            log.warning(
                "refusal of %s in session %s not recorded: %s",
                refusal.action,
                refusal.session_id,
                ex,
            )
