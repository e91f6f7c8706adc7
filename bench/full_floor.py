"""The floor of ``ratio.append_full_vs_raw``, and where a durable append's time goes beyond it.

    python -m bench.full_floor [--events N] [--rounds 7]

Three appenders take turns in rounds on fresh files, one event per durable commit at FULL:

- ``raw``: ``bench.log.raw_appends``, the baseline of the ratio;
- ``floor``: a minimal program that does only what a foldline append must: encode the event,
  look its transition up in the machine's table, stamp the time, link the chain (sha256 over
  the envelope), then BEGIN IMMEDIATE, the ``events`` row, the ``streams`` head upsert and
  COMMIT on a log made by ``open_log`` (so SQLite's own checkpoints, in COMMIT, as the raw
  baseline's);
- ``append``: ``Log.append``.

Rates leave out opening and closing the file. Prints each one's median rate and the median
over rounds of its ratio to ``raw``, then the per-append latency percentiles of each (the last
round): a ratio short of the floor's shows as a slower median append, a longer tail, or both.
A profile, not a goal.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import msgspec

from bench.common import STREAMS, WITH_SERVER_MODELS, Workdir, item_event
from bench.log import raw_appends
from engine import chain, open_log
from engine.storage.streams_table import UPSERT_SQL
from projections import default_projections

Appender = Callable[[Path, int, list[float]], float]


def _raw(path: Path, n: int, latencies: list[float]) -> float:
    return raw_appends(path, n, "full")  # its own loop: only its rate is known


def _floor(path: Path, n: int, latencies: list[float]) -> float:
    log = open_log(path, WITH_SERVER_MODELS, default_projections(), sync="full")
    table = log.machines.for_stream("item:s0").table
    log.close()
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA synchronous = FULL")
    execute = conn.cursor().execute
    encode, now, utc = msgspec.json.encode, datetime.datetime.now, datetime.UTC
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
        at = now(utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        row = (i + 1, stream_id, version + 1, event_type, at, 0, None, after)
        previous = chain.link(previous, *row, payload)
        execute("BEGIN IMMEDIATE")
        execute("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)", (*row, payload, previous))
        execute(UPSERT_SQL, (stream_id, "item", version + 1, after, i + 1, i + 1, at, at))
        execute("COMMIT")
        heads[stream_id] = (version + 1, after)
        latencies.append(time.perf_counter() - started)
    conn.close()
    return n / sum(latencies)


def _append(path: Path, n: int, latencies: list[float]) -> float:
    log = open_log(path, WITH_SERVER_MODELS, default_projections(), sync="full")
    versions = [0] * STREAMS
    for i in range(n):
        started = time.perf_counter()
        k = i % STREAMS
        log.append(f"item:s{k}", versions[k], [item_event(i, versions[k])])
        versions[k] += 1
        latencies.append(time.perf_counter() - started)
    log.close()
    return n / sum(latencies)


APPENDERS: dict[str, Appender] = {"raw": _raw, "floor": _floor, "append": _append}


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
