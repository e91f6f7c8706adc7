"""Appends from many threads made to commit as one shared batch of the group commit."""

from __future__ import annotations

import threading
import time
from typing import Any

from engine import Event, Log


def one_batch(
    log: Log, appends: list[tuple[str, int, Event]], commands: dict[int, str] | None = None
) -> list[Any]:
    """Run ``appends`` from threads of their own as one shared batch; each one's outcome.
    ``commands``: the command id of some of them, by index.

    A write holding the transaction open makes them queue behind it (white-box: the queue is
    watched, bounded in time), so they must commit together. It holds it for less than the
    server's idle-in-transaction limit (``engine.storage.postgres.storage``)."""
    entered, gate = threading.Event(), threading.Event()

    def hold(tx: Any) -> None:
        entered.set()
        gate.wait(5)

    holder = threading.Thread(target=lambda: log.write(hold))
    holder.start()
    # The writers start once the holder's batch is running its work: had they queued while
    # it opened its transaction, they would have joined that batch.
    assert entered.wait(10), "the holding write never ran"
    outcomes: list[Any] = [None] * len(appends)

    def writer(i: int) -> None:
        stream_id, expected, event = appends[i]
        try:
            command_id = (commands or {}).get(i)
            outcomes[i] = log.append(stream_id, expected, [event], command_id=command_id)
        except Exception as ex:  # collected and asserted by the caller
            outcomes[i] = ex

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(appends))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 4  # less than the holder's wait
    while len(log._group._queue) < len(appends) and time.monotonic() < deadline:
        time.sleep(0.01)
    queued = len(log._group._queue)
    gate.set()
    for thread in [holder, *threads]:
        thread.join(timeout=30)
    assert queued == len(appends), "the writers never queued behind the held transaction"
    assert log.stats.batch_sizes.get(len(appends)) == 1, log.stats.batch_sizes
    return outcomes
