"""Cross-process and cross-host wake-ups for a log on PostgreSQL: ``LISTEN``, not polling.

Every commit that appends sends ``NOTIFY`` on the log's channel
(``engine.storage.postgres.writer``); PostgreSQL delivers it after the commit to every listening
connection, on any host. ``Listener`` is this backend's ``engine.storage.seam.Wakeups``: the
notifier's thread (``engine.notifier``) runs it instead of polling, and for each notification it
does what the notifier does after a change of the data version: wakes ``Log.wait_for`` callers
and sends ``signals.committed``. A notification is a hint, never the data: readers then read by
position, so a lost one (a dropped connection) costs latency, not correctness. After a reconnect
the waiters are woken once anyway, for whatever was committed while nobody listened.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg

log = logging.getLogger("foldline.pg_notifier")
# How often the thread looks at its stop flag while no notification arrives, and how long it
# waits before listening again on a lost connection.
TICK_S = 0.2
RETRY_S = 0.5


class Listener:
    """LISTEN on one log's channel, on a connection of its own, until stopped."""

    def __init__(self, conninfo: str, channel: str) -> None:
        self.conninfo = conninfo
        self.channel = channel

    def run(
        self, wake: Callable[[], None], stop: threading.Event, listening: threading.Event
    ) -> None:
        while not stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    listening.set()
                    wake()  # commits made before LISTEN took effect
                    while not stop.is_set():
                        woken = False
                        for _ in conn.notifies(timeout=TICK_S):
                            woken = True
                            break  # one wake-up covers every commit so far
                        if woken:
                            wake()
            except psycopg.Error as ex:
                listening.clear()
                log.warning("LISTEN connection lost (%s); listening again", ex)
                stop.wait(RETRY_S)
