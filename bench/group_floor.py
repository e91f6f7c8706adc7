"""The floor of ``ratio.group_commit_vs_single``: sixteen durable writers doing an append's own
work and nothing else, batched as well as batching goes.

    python -m bench.group_floor [--threads 16] [--calls 150] [--rounds 5]

``bench.log.bench_group_commit`` sets the group commit against ``RawGroupCommit``, raw APSW
where the callers' rows share one commit, which does none of an append's own work: no
validation, no legality, no chain, no heads. Here the floor does that work too, so that the
ratio of two floors says what sixteen writers can gain on this machine at all:

- ``guarded``: ``bench.full_floor``'s guarded appender, one writer: an append's checks, its
  rows and one COMMIT each, nothing else;
- ``guarded_group``: the same work from ``--threads`` threads sharing one commit
  (``GuardedGroupCommit``): each caller validates and encodes its event and waits at a
  barrier; the last to arrive reads each stream's head, checks the transition, links the
  chain and writes every row and head in one transaction, and only that COMMIT lets them
  go. Every batch is full, with no queue, linger or hand-over;
- ``single`` and ``threads``: ``Log.append`` from one thread and from ``--threads``, as
  ``bench_group_commit`` runs them.

One event per call, each measure on a fresh file at FULL: the threads write new streams, as
the ratio's threads do, and the single writers go round 1,000 streams, as its single writer
does. The four take turns in rounds. Prints each one's median rate, then the medians over rounds of
``guarded_group_vs_guarded`` (the floor of ``group_commit_vs_single``),
``threads_vs_single`` (that ratio in these rounds) and ``threads_vs_guarded_group`` (how
close the group commit comes to its floor). A profile, not a goal.
"""

from __future__ import annotations

import argparse
import statistics
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw

from bench.common import (
    TEXT,
    WITH_SERVER_MODELS,
    ItemCreated,
    Workdir,
    concurrent_appends,
    engine_appends,
    run_threads,
)
from bench.full_floor import APPENDERS, INSERT_EVENT, one_event_result
from engine import chain, open_log
from engine.clock import SystemClock, recorder
from engine.machines import Machine, StreamHead
from engine.storage.sqlite.files import FileIdentity
from engine.storage.streams_table import HEAD_SQL, UPSERT_SQL
from engine.write.transaction import AppendResult
from projections import default_projections


class GuardedGroupCommit:
    """``bench.full_floor``'s guarded append for ``count`` threads that share every commit."""

    def __init__(self, path: Path, count: int) -> None:
        log = open_log(path, WITH_SERVER_MODELS, default_projections(), sync="full")
        self._codec, self._machines = log.codec, log.machines
        log.close()
        self._identity = FileIdentity(str(path))
        self.conn = apsw.Connection(str(path))
        self.conn.execute("PRAGMA synchronous = FULL")
        self._cursor = self.conn.cursor()
        self._now = recorder(SystemClock())
        self._position, self._previous = 0, chain.GENESIS
        self._seen = self.conn.data_version()
        self._slots: list[tuple[str, Machine, ItemCreated, str, bytes]] = []
        self._results: dict[str, AppendResult] = {}
        self._lock = threading.Lock()
        self._barrier = threading.Barrier(count, action=self._commit)

    def append(self, stream_id: str) -> AppendResult:
        machine = self._machines.for_stream(stream_id)
        event = ItemCreated(text=TEXT)
        event_type, payload = self._codec.encode(event)
        with self._lock:
            self._slots.append((stream_id, machine, event, event_type, payload))
        self._barrier.wait()
        return self._results[stream_id]

    def _commit(self) -> None:
        execute = self._cursor.execute
        execute("BEGIN IMMEDIATE")
        assert self.conn.data_version() == self._seen  # nobody else wrote
        at = self._now()
        position, previous = self._position, self._previous
        rows, heads = [], []
        results = self._results = {}
        for stream_id, machine, event, event_type, payload in self._slots:
            found: list[Any] = execute(HEAD_SQL, (stream_id,)).fetchall()
            head = StreamHead(stream_id, *found[0]) if found else StreamHead(stream_id, 0, None)
            state = machine.next_state(head, event, event_type)
            position += 1
            version = head.version + 1
            row = chain.linked_row(
                previous, position, stream_id, version, event_type, at, 0, None, state, payload
            )
            previous = row[9]
            rows.append(row)
            heads.append((stream_id, "item", version, state, position, position, at, at))
            results[stream_id] = one_event_result(stream_id, version, position, state)
        self._cursor.executemany(INSERT_EVENT, rows)
        self._cursor.executemany(UPSERT_SQL, heads)
        self._identity.check_open(self.conn)
        execute("COMMIT")
        self._seen = self.conn.data_version()
        self._position, self._previous = position, previous
        self._slots = []


def guarded_group(path: Path, threads: int, calls: int) -> float:
    """Events per second of ``GuardedGroupCommit`` from ``threads`` threads."""
    floor = GuardedGroupCommit(path, threads)

    def call(t: int, i: int) -> None:
        floor.append(f"item:g{t}-{i}")

    try:
        seconds = run_threads(threads, calls, call)
    finally:
        floor.conn.close()
    return threads * calls / seconds


def on_log(path: Path, measure: str, threads: int, calls: int) -> float:
    """Events per second of ``Log.append`` from one thread or from ``threads``."""
    log = open_log(path, WITH_SERVER_MODELS, default_projections(), sync="full")
    try:
        if measure == "single":
            return engine_appends(log, threads * calls)
        return concurrent_appends(log, threads * calls, threads)
    finally:
        log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--calls", type=int, default=150, help="per thread, fewer than 1000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not (args.threads >= 2 and 1 <= args.calls < 1000 and args.rounds >= 1):
        parser.error("--threads must be 2 or more, --calls 1-999, --rounds 1 or more")
    n = args.threads * args.calls  # the single writers append as many events
    measures: dict[str, Callable[[Path], float]] = {
        "guarded": lambda path: APPENDERS["guarded"](path, n, []),
        "guarded_group": lambda path: guarded_group(path, args.threads, args.calls),
        "single": lambda path: on_log(path, "single", args.threads, args.calls),
        "threads": lambda path: on_log(path, "threads", args.threads, args.calls),
    }
    rates: dict[str, list[float]] = {name: [] for name in measures}
    work = Workdir()
    try:
        for _ in range(args.rounds):
            for name, measure in measures.items():
                rates[name].append(measure(work.path()))
    finally:
        work.close()
    for name, values in rates.items():
        print(f"group_floor.{name}.events_per_s: {statistics.median(values):.0f}")
    for name, (top, bottom) in {
        "guarded_group_vs_guarded": ("guarded_group", "guarded"),
        "threads_vs_single": ("threads", "single"),
        "threads_vs_guarded_group": ("threads", "guarded_group"),
    }.items():
        ratios = [a / b for a, b in zip(rates[top], rates[bottom], strict=True)]
        print(f"ratio.group_floor.{name}: {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
