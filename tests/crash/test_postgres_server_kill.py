"""kill -9 of the PostgreSQL server itself while writers append: nothing acknowledged is lost.

The server gets a cluster of its own (the session's is shared by every other test). Writers in
threads append until the server dies under them; every append that returned before then must
be in the log after the server restarts, at the position it was acknowledged at, with the
chain intact, and the same ``Log`` goes on appending on new connections.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from engine import EngineError, open_log
from tests.support.postgres import Cluster, with_schema
from tests.support.tickets import MACHINES, TicketNoted, TicketOpened, TicketTitles

WRITERS = 4
ACKED_BEFORE_KILL = 200
DEADLINE_S = 60.0


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    own = Cluster()
    yield own
    own.stop()


@pytest.mark.crash
@pytest.mark.slow
def test_postgres_kill_9_of_the_server_loses_no_acknowledged_append(cluster: Cluster) -> None:
    url = with_schema(cluster.url, "killed")
    log = open_log(url, MACHINES, [TicketTitles()])
    acked: list[tuple[str, int, int]] = []  # stream, version, position
    failures: list[BaseException] = []
    enough = threading.Event()
    lock = threading.Lock()

    def writer(n: int) -> None:
        stream = f"ticket:w{n}"
        version = log.append(stream, 0, [TicketOpened(title=stream)]).last_version
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                result = log.append(stream, version, [TicketNoted(text="x")])
            except EngineError as ex:  # the server is gone: this one was not acknowledged
                failures.append(ex)
                return
            version = result.last_version
            with lock:
                acked.append((stream, version, result.last_position))
                if len(acked) >= ACKED_BEFORE_KILL:
                    enough.set()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    assert enough.wait(DEADLINE_S), "writers did not get going"
    cluster.kill()
    for thread in threads:
        thread.join(DEADLINE_S)
    assert not any(thread.is_alive() for thread in threads)
    assert len(failures) == WRITERS  # every writer saw the server die
    with lock:
        acknowledged = list(acked)

    cluster.start()
    assert with_schema(cluster.url, "killed") == url  # same socket: the old Log can reconnect
    reopened = open_log(url, MACHINES, [TicketTitles()])
    stored = {(e.stream_id, e.version): e.position for e in reopened.iter_all()}
    for stream, version, position in acknowledged:
        assert stored.get((stream, version)) == position
    assert reopened.verify_chain() == []
    assert reopened.content_hash() == reopened.rebuild()

    # The log that saw the crash writes again on a fresh connection, after the true tail.
    head = log.stream_head("ticket:w0")
    after = log.append("ticket:w0", head.version, [TicketNoted(text="after")])
    assert after.last_position == reopened.head()
    assert reopened.verify_chain() == []
    reopened.close()
    log.close()
