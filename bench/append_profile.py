"""Where one lone append at synchronous NORMAL spends its time, in microseconds per event.

    python -m bench.append_profile [--events N] [--runs 7]

Prints, each the minimum over ``--runs`` (the least disturbed run on a shared box):

- ``raw``: ``bench.log.raw_appends``, the baseline of ``ratio.append_normal_vs_raw``;
- ``sql_floor``: the statements a lone append runs (BEGIN IMMEDIATE, the data version, the
  ``events`` row with its chain hash, the ``streams`` head upsert, the file's ``stat``, COMMIT),
  on rows computed beforehand, on a log opened by ``open_log``: what the log stores, at no
  Python cost;
- ``append``: ``Log.append``, all of it;
- ``python``: ``Log.append`` with the writer's SQL replaced by nothing, and its parts, each
  timed alone: ``check+encode`` (arguments, machine lookup, msgspec encode and the strict
  decode that validates), ``chain`` (one link), ``legality`` (the machine's table),
  ``head`` (the new head), ``recorded_at``, ``batch`` (a no-op ``Log.write``: the group
  commit's hand-off, the transaction, its scopes, the commit's bookkeeping; a lone plain
  append on a quiet log skips the transaction and its scopes, ``engine.write.lone``).

A profile, not a goal: the figures name what ``ratio.append_normal_vs_raw`` is made of.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
import timeit
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw

from bench.common import (
    STREAMS,
    TEXT,
    WITH_SERVER_MODELS,
    ItemCreated,
    ItemNoted,
    Workdir,
    engine_appends,
    item_event,
)
from bench.log import raw_appends
from engine import chain, open_log
from engine.log import Log
from engine.machines import StreamHead
from engine.storage.sqlite.writer import SqliteWriter
from engine.storage.streams_table import UPSERT_SQL
from projections import default_projections

RECORDED_AT = "2026-12-06T06:00:00.000000Z"


def sql_floor(path: Path, n: int) -> float:
    """Seconds per append for the lone append's statements alone (see the module's doc)."""
    log = open_log(path, WITH_SERVER_MODELS, default_projections(), sync="normal")
    encode = log.codec.encode
    log.close()
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.set_busy_timeout(10_000)
    conn.set_wal_hook(lambda *_: apsw.SQLITE_OK)  # as the writer's: no checkpoint in COMMIT
    rows = []
    previous = chain.GENESIS
    versions = [0] * STREAMS
    for i in range(n):
        k = i % STREAMS
        event_type, payload = encode(item_event(i, versions[k]))
        versions[k] += 1
        row = (i + 1, f"item:s{k}", versions[k], event_type, RECORDED_AT, 0, None, "active")
        previous = chain.link(previous, *row, payload)
        rows.append((*row, payload, previous))
    execute = conn.cursor().execute
    started = time.perf_counter()
    for r in rows:
        execute("BEGIN IMMEDIATE")
        conn.data_version()
        execute("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)", r)
        execute(UPSERT_SQL, (r[1], "item", r[2], r[7], r[0], r[0], r[4], r[4]))
        os.stat(path)
        execute("COMMIT")
        conn.data_version()
    seconds = time.perf_counter() - started
    conn.close()
    return seconds / n


@contextlib.contextmanager
def no_sql() -> Iterator[None]:
    """The writer's BEGIN and COMMIT (with the buffered rows) do nothing, and say that no
    other connection wrote: what is left of an append is its Python."""
    begin, commit = SqliteWriter.begin, SqliteWriter.commit
    SqliteWriter.begin = lambda self: True  # type: ignore[method-assign]
    SqliteWriter.commit = lambda self, buffered=None: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        SqliteWriter.begin, SqliteWriter.commit = begin, commit  # type: ignore[method-assign]


def each(call: Callable[[], object], runs: int, number: int = 20_000) -> float:
    return min(timeit.repeat(call, number=number, repeat=runs)) / number


def python_parts(log: Log, runs: int) -> dict[str, float]:
    event = ItemNoted(text=f"1 {TEXT}")
    machine = log.machines.for_stream("item:p")
    head = StreamHead("item:p", 1, "active")
    event_type, payload = log.codec.encode(event)
    row = (2, "item:p", 2, event_type, RECORDED_AT, 0, None, "active", payload)
    folding = log.parts.folding
    return {
        "check+encode": each(
            lambda: (log.machines.for_stream("item:p"), log.codec.encode(event)), runs
        ),
        "chain": each(lambda: chain.link(chain.GENESIS, *row), runs),
        "legality": each(
            lambda: (machine.next_state(head, event, event_type), folding(event_type)), runs
        ),
        "head": each(lambda: StreamHead("item:p", 2, "active"), runs),
        "recorded_at": each(log.parts.recorded_now, runs),
        "batch": each(lambda: log.write(lambda tx: None), runs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    n, runs = args.events, args.runs
    work = Workdir()
    try:
        raw, floor, append, python = [], [], [], []
        for r in range(runs):
            raw.append(1 / raw_appends(work.path(), n, "normal"))
            floor.append(sql_floor(work.path(), n))
            log = open_log(work.path(), WITH_SERVER_MODELS, default_projections(), sync="normal")
            append.append(1 / engine_appends(log, n))
            with no_sql():
                python.append(1 / engine_appends(log, min(n, 7000), prefix=f"p{r}-"))
            log.close()
        log = open_log(work.path(), WITH_SERVER_MODELS, default_projections(), sync="normal")
        log.append("item:p", 0, [ItemCreated(text="p")])
        with no_sql():
            parts = python_parts(log, runs)
        log.close()
    finally:
        work.close()
    print(f"raw: {min(raw) * 1e6:.1f} us")
    print(f"sql_floor: {min(floor) * 1e6:.1f} us")
    print(f"append: {min(append) * 1e6:.1f} us")
    print(f"python: {min(python) * 1e6:.1f} us")
    for name, seconds in parts.items():
        print(f"python.{name}: {seconds * 1e6:.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
