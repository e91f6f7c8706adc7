"""Cross-process wake-ups: notice commits made by other processes.

SQLite's commit hooks fire only for the connection's own writes, so a process learns of other
processes' commits by polling. ``PRAGMA data_version`` on a connection that never writes
changes after every commit by anyone else; polling it every 5 ms costs about 3 us and 1 % of a
core, and wakes a waiter in about 2.5 ms (design.md §13.2). A backend with news
of its own (``Storage.wakeups``: PostgreSQL's LISTEN) is run instead of the poll. Either way the
notifier then wakes ``Log.wait_for`` callers and sends ``signals.committed``: a hint, never the
truth.

The notifier sees the log through ``Watched``, the four things it uses, so that it needs
nothing of ``engine.log`` (which needs nothing of it).
"""

from __future__ import annotations

import threading
from typing import Protocol

from engine import process, signals
from engine.storage.seam import Storage


class Watched(Protocol):
    """What the notifier needs of a log (``engine.log.Log`` is one)."""

    @property
    def storage(self) -> Storage: ...

    def data_version(self) -> int: ...

    def head(self) -> int: ...

    def wake(self) -> None: ...


class Notifier:
    """One thread per process and log: polls the data version, or runs the backend's own
    wake-ups. Start it with ``open_notifier``."""

    thread_name = "foldline-notifier"

    def __init__(self, log: Watched, interval: float = 0.005) -> None:
        self.log = log
        self.interval = interval
        self._wakeups = log.storage.wakeups()
        self._stop = threading.Event()
        # Set while a commit elsewhere would wake this notifier (tests wait on it).
        self.listening = threading.Event()
        self._pid = process.pid()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def start(self) -> Notifier:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._pid == process.pid():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        if self._wakeups is not None:
            self._wakeups.run(self._wake, self._stop, self.listening)
            return
        seen = self.log.data_version()
        self.listening.set()
        while not self._stop.wait(self.interval):
            version = self.log.data_version()
            if version == seen:
                continue
            seen = version
            self._wake()

    def _wake(self) -> None:
        """Wake ``Log.wait_for`` callers and tell ``signals.committed`` subscribers."""
        self.log.wake()
        if signals.committed.receivers:
            signals.committed.send(self.log, position=self.log.head())


def open_notifier(log: Watched, interval: float = 0.005) -> Notifier:
    """Start noticing other processes' commits; call ``stop`` when done."""
    return Notifier(log, interval).start()
