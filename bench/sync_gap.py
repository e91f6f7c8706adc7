"""How long a durable commit takes against how long the program computes between two of them.

    python -m bench.sync_gap [--events N] [--rounds 3] [--gaps 0 5 10 15 20 30 45]

One raw APSW append per commit at FULL (BEGIN IMMEDIATE, one INSERT, COMMIT on a plain table),
with ``gap`` microseconds of busy Python before each BEGIN: the time an engine's own code would
take there. The gaps take turns in rounds on fresh files. Prints, for each gap, the COMMIT's
median and mean in microseconds and the whole append's rate, and the mean COMMIT over the mean
COMMIT without a gap.

On a disk whose sync costs the same whatever the caller did before it, every gap's COMMIT is
the same and the rate falls only by the gap itself. Where the sync gets slower once the
program has computed for longer than some threshold (a virtual disk whose host stops polling
for the next request, say), that threshold is where an engine's Python between two syncs costs
it far more than its own duration: the figure behind ``ratio.append_full_vs_raw``
(docs/benchmarks.md). A profile, not a goal.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import apsw

from bench.common import TEXT, Workdir


def appends(path: Path, n: int, gap_us: float) -> tuple[list[float], float]:
    """The COMMIT of each of ``n`` appends with ``gap_us`` of computing before each, and the
    appends' rate."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE events (position INTEGER PRIMARY KEY, payload TEXT)")
    execute, clock = conn.cursor().execute, time.perf_counter
    gap_s = gap_us / 1e6
    commits = []
    started = clock()
    for _ in range(n):
        until = clock() + gap_s
        while clock() < until:  # the engine's own work, standing in
            pass
        execute("BEGIN IMMEDIATE")
        execute("INSERT INTO events VALUES (NULL, ?)", (TEXT,))
        before = clock()
        execute("COMMIT")
        commits.append(clock() - before)
    rate = n / (clock() - started)
    conn.close()
    return commits, rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gaps", type=float, nargs="+", default=[0, 5, 10, 15, 20, 30, 45])
    args = parser.parse_args()
    if args.gaps[0] != 0:
        parser.error("the first gap must be 0: every other gap's COMMIT is compared with it")
    commits: dict[float, list[float]] = {gap: [] for gap in args.gaps}
    rates: dict[float, list[float]] = {gap: [] for gap in args.gaps}
    work = Workdir()
    try:
        for r in range(args.rounds):
            turn = r % len(args.gaps)
            for gap in args.gaps[turn:] + args.gaps[:turn]:
                seconds, rate = appends(work.path(), args.events, gap)
                commits[gap] += seconds
                rates[gap].append(rate)
    finally:
        work.close()
    base = statistics.mean(commits[args.gaps[0]])
    for gap in args.gaps:
        us = [s * 1e6 for s in commits[gap]]
        name = f"sync_gap.{gap:g}us"
        print(f"{name}.commit_us: p50={statistics.median(us):.0f} mean={statistics.mean(us):.0f}")
        print(f"{name}.events_per_s: {statistics.median(rates[gap]):.0f}")
        print(f"ratio.{name}.commit_vs_no_gap: {statistics.mean(commits[gap]) / base:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
