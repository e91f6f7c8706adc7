"""Where a PostgreSQL group-commit batch's time goes: 16 threads appending, counted per batch.

    python -m bench.pg_profile [--events N] [--runs N]

Prints, per batch of the run: its wall time and the whole process's CPU; for the leader's
phases (the head lock, the heads lookup, the appends' Python, the commit pipeline) the
leader thread's own CPU and the wall time it spent there (the difference is waiting for the
server); the average batch size; and, in the same process, raw psycopg's wall time for a
transaction of 16 rows (``bench.postgres.raw_batches``), the floor. A profile, not a goal:
the phases are timed by wrapping the writer's methods, which costs a little of its own.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from bench.common import WITH_SERVER_MODELS, concurrent_appends, item_event
from bench.postgres import Server, raw_batches
from engine import open_log
from engine.storage.postgres.writer import PostgresWriter
from engine.write.transaction import Transaction
from projections import default_projections

PHASES: tuple[tuple[type, str], ...] = (
    (PostgresWriter, "begin"),
    (PostgresWriter, "stream_heads"),
    (PostgresWriter, "stream_head"),
    (Transaction, "append_encoded"),
    (PostgresWriter, "commit"),
)


def _timed(
    method: Callable[..., Any], name: str, cpu: dict[str, float], wall: dict[str, float]
) -> Any:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started_cpu, started = time.thread_time(), time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            cpu[name] += time.thread_time() - started_cpu
            wall[name] += time.perf_counter() - started

    return timed


def profile(server: Server, n: int, threads: int = 16) -> dict[str, float]:
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    originals = [(cls, name, getattr(cls, name)) for cls, name in PHASES]
    log = open_log(server.url(), WITH_SERVER_MODELS, default_projections())
    log.append("item:warm", 0, [item_event(0, 0)])  # the schema, the prepared state: not counted
    before = sum(log.stats.batch_sizes.values())
    for cls, name, method in originals:
        setattr(cls, name, _timed(method, name, cpu, wall))
    try:
        started_cpu, started = time.process_time(), time.perf_counter()
        rate = concurrent_appends(log, n, threads)
        spent_cpu, spent = time.process_time() - started_cpu, time.perf_counter() - started
    finally:
        for cls, name, method in originals:
            setattr(cls, name, method)
    batches = sum(log.stats.batch_sizes.values()) - before
    log.close()
    figures = {
        "events_per_s": rate,
        "batch_size": (log.stats.events - 1) / batches,
        "batch_wall_ms": spent / batches * 1e3,
        "batch_process_cpu_ms": spent_cpu / batches * 1e3,
    }
    for _, name in PHASES:
        figures[f"{name}_cpu_ms"] = cpu[name] / batches * 1e3
        figures[f"{name}_wall_ms"] = wall[name] / batches * 1e3
    raw_started = time.perf_counter()
    raw_batches(server, n, threads)
    figures["raw_batch_wall_ms"] = (time.perf_counter() - raw_started) / (n // threads) * 1e3
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=4800)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server = Server()
    try:
        runs = [profile(server, args.events) for _ in range(args.runs)]
    finally:
        server.close()
    print(f"pg batch profile: 16 threads, {args.events} events, median of {args.runs} runs")
    for key in runs[0]:
        print(f"{key}: {statistics.median(run[key] for run in runs):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
