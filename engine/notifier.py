"""Cross-process wake-ups: notice commits made by other processes.

SQLite's commit hooks fire only for the connection's own writes, so a process learns of other
processes' commits by polling. ``PRAGMA data_version`` on a connection that never writes
changes after every commit by anyone else; polling it every 5 ms costs about 3 us and 1 % of a
core, and wakes a waiter in about 2.5 ms (reference/library-facts.md §2). The notifier then
wakes ``Log.wait_for`` callers and sends ``signals.committed``: a hint, never the truth.
"""

from __future__ import annotations

import os
import threading

from engine import signals
from engine.log import Log


class Notifier:
    """One polling thread per process and log. Start it with ``open_notifier``. A backend with
    wake-ups of its own subclasses it and replaces ``_run`` (``engine.pg_notifier``)."""

    thread_name = "foldline-notifier"

    def __init__(self, log: Log, interval: float = 0.005) -> None:
        self.log = log
        self.interval = interval
        self._stop = threading.Event()
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def start(self) -> Notifier:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._pid == os.getpid():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        seen = self.log.data_version()
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


def open_notifier(log: Log, interval: float = 0.005) -> Notifier:
    """Start noticing other processes' commits; call ``stop`` when done. A backend with wake-ups
    of its own (PostgreSQL's LISTEN, ``engine.pg_notifier``) gives them instead of polling."""
    own = getattr(log.storage, "notifier", None)
    if own is not None:
        started: Notifier = own(log).start()
        return started
    return Notifier(log, interval).start()
