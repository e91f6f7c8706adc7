"""What the benchmarks share: the item machine their logs append to, a fresh folder per
measurement, a log built fast, and appends measured one commit each or from many threads.

``bench.run`` composes the cases; ``bench.log``, ``bench.postgres``, ``bench.proofs`` and
``bench.pg_profile`` measure with these, so every figure appends the same events.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from engine import NEW, Event, MachineSpec, Transition, open_log
from engine.domain import MACHINES
from engine.log import Log
from projections import default_projections


class ItemCreated(Event, tag="item.created"):
    text: str = ""


class ItemNoted(Event, tag="item.noted"):
    text: str = ""


ITEM = MachineSpec(
    kind="item",
    states=["active"],
    initial="active",
    terminal=frozenset(),
    transitions=[Transition(ItemCreated, NEW, "active"), Transition(ItemNoted, ["active"])],
)
# The item logs keep the server's read models, as a server does: their machines are declared
# beside ITEM, since a projection may only handle events some machine of the log declares.
WITH_SERVER_MODELS = [ITEM, *MACHINES]
TEXT = "the agent wrote a line of output that is about this long, give or take a few words" * 2
STREAMS = 1000


class Workdir:
    """A fresh folder per measurement, removed afterwards."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="foldline-bench-"))
        self.count = 0

    def path(self) -> Path:
        self.count += 1
        return self.root / f"{self.count}" / "bench.db"

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def item_event(i: int, version: int) -> Event:
    return ItemCreated(text=TEXT) if version == 0 else ItemNoted(text=f"{i} {TEXT}")


def engine_appends(log: Log, n: int, prefix: str = "s") -> float:
    """Events per second for ``n`` single-event appends, each its own durable commit."""
    versions = [0] * STREAMS
    started = time.perf_counter()
    for i in range(n):
        k = i % STREAMS
        log.append(f"item:{prefix}{k}", versions[k], [item_event(i, versions[k])])
        versions[k] += 1
    return n / (time.perf_counter() - started)


def concurrent_appends(log: Log, n: int, threads: int, prefix: str = "") -> float:
    """Events per second for ``n`` single-event appends spread over ``threads`` threads (each
    to streams of its own, named after ``prefix``)."""
    per_thread = max(1, n // threads)
    versions = [[0] * STREAMS for _ in range(threads)]

    def append(t: int, i: int) -> None:
        k = i % STREAMS
        log.append(f"item:{prefix}t{t}-{k}", versions[t][k], [item_event(i, versions[t][k])])
        versions[t][k] += 1

    return per_thread * threads / run_threads(threads, per_thread, append)


def run_threads(count: int, calls: int, call: Callable[[int, int], None]) -> float:
    """Seconds for ``count`` threads each making ``calls`` calls ``call(thread, i)``, released
    together once all are started; a failure in any is raised once all have ended (a failed
    run has no rate)."""
    start = threading.Barrier(count + 1)
    failures: list[BaseException] = []

    def run(t: int) -> None:
        start.wait()
        try:
            for i in range(calls):
                call(t, i)
        except BaseException as ex:
            failures.append(ex)

    pool = [threading.Thread(target=run, args=(t,)) for t in range(count)]
    for thread in pool:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in pool:
        thread.join()
    if failures:
        raise RuntimeError(f"a writer thread failed: {failures[0]!r}")
    return time.perf_counter() - started


def build_log(path: Path | str, n: int, streams: int = 10_000) -> Log:
    """A log of ``n`` events over ``streams`` streams, written in large transactions, at a
    SQLite path (synchronous NORMAL: the build is not what is measured) or a PostgreSQL URL."""
    log = open_log(path, WITH_SERVER_MODELS, default_projections(), sync="normal")
    versions = [0] * streams
    batch = 5000
    for start in range(0, n, batch):

        def work(tx: object, start: int = start) -> None:
            for i in range(start, min(start + batch, n)):
                k = i % streams
                tx.append(f"item:b{k}", versions[k], [item_event(i, versions[k])])  # type: ignore[attr-defined]
                versions[k] += 1

        log.write(work)
    return log
