"""Cross-process and cross-host wake-ups for a log on PostgreSQL: ``LISTEN``, not polling.

Every commit that appends sends ``NOTIFY`` on the log's channel (``engine.postgres_storage``);
PostgreSQL delivers it after the commit to every listening connection, on any host. This thread
listens on a connection of its own and, for each wake-up, does what ``engine.notifier`` does
after a change of the data version: wakes ``Log.wait_for`` callers and sends
``signals.committed``. A notification is a hint, never the data: readers then read by
position, so a lost one (a dropped connection) costs latency, not correctness. After a
reconnect the waiters are woken once anyway, for whatever was committed while nobody listened.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import psycopg

from engine.notifier import Notifier

if TYPE_CHECKING:
    from engine.log import Log
    from engine.postgres_storage import PostgresStorage

log = logging.getLogger("foldline.pg_notifier")
# How often the thread looks at its stop flag while no notification arrives, and how long it
# waits before listening again on a lost connection.
TICK_S = 0.2
RETRY_S = 0.5


class PgNotifier(Notifier):
    """One listening thread per process and log (``engine.notifier.open_notifier`` makes it)."""

    thread_name = "foldline-pg-notifier"

    def __init__(self, log_: Log, storage: PostgresStorage) -> None:
        self._storage = storage
        self.listening = threading.Event()  # set while LISTEN is in force (tests wait on it)
        super().__init__(log_)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._storage.conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {self._storage.channel}")
                    self.listening.set()
                    self._wake()  # commits made before LISTEN took effect
                    while not self._stop.is_set():
                        woken = False
                        for _ in conn.notifies(timeout=TICK_S):
                            woken = True
                            break  # one wake-up covers every commit so far
                        if woken:
                            self._wake()
            except psycopg.Error as ex:
                self.listening.clear()
                log.warning("LISTEN connection lost (%s); listening again", ex)
                self._stop.wait(RETRY_S)
