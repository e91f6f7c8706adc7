"""Following the log: the one loop behind every streaming surface (``/v1/events`` SSE,
``/invocations`` SSE, A2A streams and blocking sends).

``follow`` yields each committed event after a position as it arrives, and ``None`` whenever
``keepalive_s`` passed without yielding one (the caller sends its keep-alive). It waits on the
log (``EventFeed.wait_for``), never on a guessed sleep, and ends, after delivering what is
committed, at the deadline or once ``stop()`` says so; the caller tells the two apart by asking
``stop()``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

from adapters.http.ports import EventFeed
from engine.events import RecordedEvent

PAGE = 1000


def follow(
    log: EventFeed,
    after: int,
    stop: Callable[[], bool],
    *,
    keepalive_s: float,
    poll_s: float = 1.0,
    deadline: float = math.inf,
    stream_id: str | None = None,
    wanted: Callable[[RecordedEvent], bool] | None = None,
) -> Iterator[RecordedEvent | None]:
    """Events after position ``after`` (of one stream if ``stream_id``; only those ``wanted``
    accepts), then ``None`` as a keep-alive tick. ``deadline`` is a ``time.monotonic()``."""
    version = 0
    quiet_since = time.monotonic()
    while True:
        # Asked before the read: all that was committed before the stop is then delivered
        # (a server's stop records its runs' cancels first), so a resumed client misses nothing.
        ending = stop() or time.monotonic() >= deadline
        head = log.head()
        if stream_id is None:
            batch = log.read_all(after, PAGE)
            if batch:
                after = batch[-1].position
        else:
            batch = log.read_stream(stream_id, version)
            if batch:
                version = batch[-1].version
        for recorded in batch:
            if stream_id is not None and recorded.position <= after:
                continue
            if wanted is not None and not wanted(recorded):
                continue
            quiet_since = time.monotonic()
            yield recorded
        if ending:
            return
        if time.monotonic() - quiet_since >= keepalive_s:
            quiet_since = time.monotonic()
            yield None
        if stream_id is None and len(batch) == PAGE:
            continue  # more is committed already: no wait before the next page
        log.wait_for(head, max(0.0, min(poll_s, keepalive_s, deadline - time.monotonic())))
