"""The floor of ``ratio.append_full_vs_raw``, and where a durable append's time goes beyond it.

    python -m bench.full_floor [--events N] [--rounds 7]

Five appenders take turns in rounds on fresh files, one event per durable commit at FULL:

- ``raw``: ``bench.log.raw_appends``, the baseline of the ratio;
- ``floor``: a minimal program that does only what a foldline append must: encode the event,
  look its transition up in the machine's table, stamp the time as the log does (a
  ``engine.clock.recorder`` made once), link the chain (sha256 over the envelope), then BEGIN
  IMMEDIATE, the ``events`` row, the ``streams`` head upsert and COMMIT on a log made by
  ``open_log`` (so SQLite's own checkpoints, in COMMIT, as the raw baseline's);
- ``guarded``: the floor with the checks every foldline append owes besides: the event
  validated against its schema and the stream id parsed (``EventCodec.encode``,
  ``Machines.for_stream``), the transition through ``Machine.next_state``, the path checked
  to still name the file before COMMIT (``FileIdentity``, ADR 0029), SQLite's data version
  read after BEGIN and after COMMIT (whether another process wrote, ADR 0021), and the
  ``AppendResult`` handed back;
- ``inlined``: ``Log.append``'s own steps on the log's own objects, every layer between them
  inlined into one function (``_append_inlined``): what ``guarded`` does, plus the duties a
  log's append owes besides its checks: the group commit's lead taken and handed back under
  its lock, the writer's cache (a head read on a miss, the cached tail, heads and validity),
  the counters, the wake-up check, and the writer connection's WAL hook and checkpoint
  thread. It reaches into private attributes, so it is a measurement, not a design: the
  gap from ``inlined`` to ``append`` is the price of the layers, the gap from ``guarded`` to
  ``inlined`` the price of the duties;
- ``append``: ``Log.append``.

Rates leave out opening and closing the file. Prints each one's median rate and the median
over rounds of its ratio to ``raw``, then the per-append latency percentiles of each (the last
round): a ratio short of the floor's shows as a slower median append, a longer tail, or both.
A profile, not a goal.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import msgspec

from bench.common import STREAMS, WITH_SERVER_MODELS, Workdir, item_event
from bench.log import raw_appends
from engine import chain, open_log, signals
from engine.clock import SystemClock, recorder
from engine.errors import ConcurrencyError, FencedOut
from engine.log import Log
from engine.machines import StreamHead
from engine.process import pid
from engine.storage.sqlite.checkpoint import CHECKPOINT_PAGES
from engine.storage.sqlite.files import FileIdentity
from engine.storage.sqlite.writer import SqliteWriter
from engine.storage.streams_table import HEAD_SQL, UPSERT_SQL
from engine.write.transaction import HEAD_CACHE_SIZE, AppendResult
from projections import default_projections

Appender = Callable[[Path, int, list[float]], float]
INSERT_EVENT = "INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)"


def _raw(path: Path, n: int, latencies: list[float]) -> float:
    return raw_appends(path, n, "full")  # its own loop: only its rate is known


def _floor(path: Path, n: int, latencies: list[float]) -> float:
    log = open_log(path, WITH_SERVER_MODELS, default_projections(), sync="full")
    table = log.machines.for_stream("item:s0").table
    log.close()
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA synchronous = FULL")
    execute = conn.cursor().execute
    encode, now = msgspec.json.encode, recorder(SystemClock())
    heads: dict[str, tuple[int, str | None]] = {}
    previous = chain.GENESIS
    for i in range(n):
        started = time.perf_counter()
        stream_id = f"item:s{i % STREAMS}"
        version, state = heads.get(stream_id, (0, None))
        event = item_event(i, version)
        event_type = str(event.__struct_config__.tag)
        payload = encode(event)
        rules = table[(state, event_type)]
        after = rules[0].dest or state
        assert after is not None, (stream_id, event_type)  # every item event has a state
        at = now()
        row = (i + 1, stream_id, version + 1, event_type, at, 0, None, after)
        previous = chain.link(previous, *row, payload)
        execute("BEGIN IMMEDIATE")
        execute(INSERT_EVENT, (*row, payload, previous))
        execute(UPSERT_SQL, (stream_id, "item", version + 1, after, i + 1, i + 1, at, at))
        execute("COMMIT")
        heads[stream_id] = (version + 1, after)
        latencies.append(time.perf_counter() - started)
    conn.close()
    return n / sum(latencies)


def _on_log(append: Callable[[Log, str, int, Any], object]) -> Appender:
    """An appender that opens a log and calls ``append(log, stream_id, expected, event)`` for
    each event, timing each call."""

    def appender(path: Path, n: int, latencies: list[float]) -> float:
        log = open_log(path, WITH_SERVER_MODELS, default_projections(), sync="full")
        versions = [0] * STREAMS
        for i in range(n):
            started = time.perf_counter()
            k = i % STREAMS
            append(log, f"item:s{k}", versions[k], item_event(i, versions[k]))
            versions[k] += 1
            latencies.append(time.perf_counter() - started)
        log.close()
        return n / sum(latencies)

    return appender


def _log_append(log: Log, stream_id: str, expected: int, event: Any) -> object:
    return log.append(stream_id, expected, [event])


def _inlined(log: Log, stream_id: str, expected: int, event: Any) -> object:
    found = _append_inlined(log, stream_id, expected, event)
    # None: the log's first batch, or a log that is not quiet: the log's own way.
    return found if found is not None else log.append(stream_id, expected, [event])


def one_event_result(stream_id: str, version: int, position: int, state: str) -> AppendResult:
    """What ``Log.append`` hands back for one event, as the floors build it too."""
    return AppendResult(
        stream_id=stream_id,
        first_version=version,
        last_version=version,
        first_position=position,
        last_position=position,
        state=state,
    )


def _guarded(path: Path, n: int, latencies: list[float]) -> float:
    log = open_log(path, WITH_SERVER_MODELS, default_projections(), sync="full")
    codec, machines = log.codec, log.machines
    log.close()
    identity = FileIdentity(str(path))
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA synchronous = FULL")
    execute, data_version = conn.cursor().execute, conn.data_version
    now = recorder(SystemClock())
    heads: dict[str, Any] = {}
    previous = chain.GENESIS
    seen = data_version()
    for i in range(n):
        started = time.perf_counter()
        stream_id = f"item:s{i % STREAMS}"
        machine = machines.for_stream(stream_id)
        head = heads.get(stream_id) or StreamHead(stream_id, 0, None)
        event = item_event(i, head.version)
        event_type, payload = codec.encode(event)
        after = machine.next_state(head, event, event_type)
        at = now()
        version = head.version + 1
        row = (i + 1, stream_id, version, event_type, at, 0, None, after)
        previous = chain.link(previous, *row, payload)
        execute("BEGIN IMMEDIATE")
        assert data_version() == seen  # nobody else wrote: the cached heads hold
        execute(INSERT_EVENT, (*row, payload, previous))
        execute(UPSERT_SQL, (stream_id, "item", version, after, i + 1, i + 1, at, at))
        identity.check_open(conn)
        execute("COMMIT")
        seen = data_version()
        heads[stream_id] = StreamHead(stream_id, version, after)
        one_event_result(stream_id, version, i + 1, after)
        latencies.append(time.perf_counter() - started)
    conn.close()
    return n / sum(latencies)


def _append_inlined(log: Log, stream_id: str, expected: int, event: Any) -> AppendResult | None:
    """``Log.append(stream_id, expected, [event])`` by ``engine.write.lone``'s way, for one
    event that no projection folds, in one frame; None, having changed nothing, where that
    way does not apply."""
    if type(expected) is not int or expected < 0:
        raise ValueError(expected)
    machine = log.machines.for_stream(stream_id)
    event_type, payload = log.codec.encode(event)
    group = log._group
    if group._pid != pid():
        return None
    with group._lock:
        if group._leading or group._queue or group._last_batch >= 2:
            return None
        group._leading = True
    group._last_batch = 1
    context, cache = log.parts, log.parts.cache
    try:
        started = time.perf_counter()
        writer = log.storage.writer()
        assert isinstance(writer, SqliteWriter)
        execute, conn = writer._execute, writer._conn
        execute("BEGIN IMMEDIATE")
        if (
            conn.data_version() != writer._version_after_commit
            or not cache.valid
            or not cache.settled
            or context.declarations is not None
            or context.folding(event_type)
        ):
            execute("ROLLBACK")
            return None
        head = cache.heads.get(stream_id)
        if head is None:
            rows = execute(HEAD_SQL, (stream_id,)).fetchall()
            head = StreamHead(stream_id, *rows[0]) if rows else StreamHead(stream_id, 0, None)
        version = head.version
        if version != expected:
            execute("ROLLBACK")
            raise ConcurrencyError(stream_id, expected, version)
        position, previous, last_epoch = cache.tail
        epoch = context.epoch
        if epoch < last_epoch:
            execute("ROLLBACK")
            raise FencedOut(epoch, last_epoch)
        at = context.recorded_now()
        state = machine.next_state(head, event, event_type)
        position += 1
        version += 1
        row = (position, stream_id, version, event_type, at, epoch, None, state, payload)
        previous = chain.link(previous, *row)
        execute(INSERT_EVENT, (*row, previous))
        kind = stream_id.partition(":")[0]
        execute(UPSERT_SQL, (stream_id, kind, version, state, position, position, at, at))
        if writer._identity is not None:
            writer._identity.check_open(conn)
        execute("COMMIT")
        writer._version_after_commit = conn.data_version()
        if writer._wal_pages >= CHECKPOINT_PAGES:
            writer._checkpoint()
        cache.tail = (position, previous, epoch)
        heads = cache.heads
        if len(heads) >= HEAD_CACHE_SIZE:
            heads.clear()
        heads[stream_id] = StreamHead(stream_id, version, state)
        stats = context.stats
        stats.commits += 1
        stats.events += 1
        stats.commit_seconds += time.perf_counter() - started
        sizes = stats.batch_sizes
        sizes[1] = sizes.get(1, 0) + 1
        if log._waiting:
            log.wake()
        if signals.committed.receivers:
            signals.committed.send(log, position=position)
        return one_event_result(stream_id, version, position, state)
    finally:
        group.hand_over()


APPENDERS: dict[str, Appender] = {
    "raw": _raw,
    "floor": _floor,
    "guarded": _guarded,
    "inlined": _on_log(_inlined),
    "append": _on_log(_log_append),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {name: [] for name in APPENDERS}
    latencies: dict[str, list[float]] = {}
    work = Workdir()
    try:
        for _ in range(args.rounds):
            for name, appender in APPENDERS.items():
                latencies[name] = []
                rates[name].append(appender(work.path(), args.events, latencies[name]))
    finally:
        work.close()
    for name, values in rates.items():
        ratios = [ours / raw for ours, raw in zip(values, rates["raw"], strict=True)]
        print(f"full_floor.{name}.events_per_s: {statistics.median(values):.0f}")
        print(f"ratio.full_floor.{name}_vs_raw: {statistics.median(ratios):.3f}")
    for name, seconds in latencies.items():
        if seconds:
            us = sorted(s * 1e6 for s in seconds)
            at = {p: us[min(len(us) - 1, int(len(us) * p / 100))] for p in (50, 90, 99)}
            print(
                f"full_floor.{name}.latency_us: " + " ".join(f"p{p}={v:.0f}" for p, v in at.items())
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
