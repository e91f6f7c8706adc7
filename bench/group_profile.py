"""Where one batch of the group commit spends its time under 16 writer threads, at FULL.

    python -m bench.group_profile [--threads 16] [--calls 150] [--runs 3]

Each thread appends ``--calls`` new streams one event at a time, as
``ratio.group_commit_vs_single`` and ``ratio.append_vs_eventsourcing_threads16`` do. The
leader of each batch is timed at its steps, and the medians over the batches (the first five
left out) are printed in microseconds:

- ``gather``: the leader's start to its BEGIN: the linger, while the callers woken by the
  last commit run their next append's Python (checks, encoding, queueing) one after the
  other under the GIL;
- ``begin``: BEGIN IMMEDIATE;
- ``works``: the batch's works, one scope each (heads, legality, chain, rows);
- ``commit``: the rows written and COMMIT with its sync;
- ``wake``: after the COMMIT until the leader is done (the callers' locks released);
- ``cycle``: one leader's start to the next's;

beside ``floor_cycle``: the same threads through ``bench.log.RawGroupCommit`` (raw APSW, all
callers' rows in one commit, nothing else), the whole run's time over its commits. A
profile, not a goal: it says what the threads16 ratios are made of.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

from bench.common import TEXT, WITH_SERVER_MODELS, ItemCreated, Workdir, run_threads
from bench.log import RawGroupCommit
from engine import open_log
from engine.storage.seam import NOTHING_BUFFERED, Buffered
from engine.storage.sqlite.writer import SqliteWriter
from engine.write.group_commit import GroupCommit
from projections import default_projections

STEPS = ("lead", "begin", "begun", "commit", "committed", "end")


def batch_steps(work: Workdir, threads: int, calls: int) -> tuple[list[dict[str, float]], float]:
    """Each batch's step times (``STEPS``), and the events per second of the run."""
    batches: list[dict[str, float]] = []
    now: dict[str, float] = {}
    begin, commit, lead = SqliteWriter.begin, SqliteWriter.commit, GroupCommit._lead

    def timed_begin(self: SqliteWriter) -> bool:
        now["begin"] = time.perf_counter()
        began = begin(self)
        now["begun"] = time.perf_counter()
        return began

    def timed_commit(self: SqliteWriter, buffered: Buffered = NOTHING_BUFFERED) -> None:
        now["commit"] = time.perf_counter()
        commit(self, buffered)
        now["committed"] = time.perf_counter()

    def timed_lead(self: GroupCommit) -> None:
        now.clear()
        now["lead"] = time.perf_counter()
        lead(self)
        now["end"] = time.perf_counter()
        batches.append(dict(now))

    SqliteWriter.begin = timed_begin  # type: ignore[method-assign]
    SqliteWriter.commit = timed_commit  # type: ignore[method-assign]
    GroupCommit._lead = timed_lead  # type: ignore[method-assign]
    log = open_log(work.path(), WITH_SERVER_MODELS, default_projections())
    item = ItemCreated(text=TEXT)
    try:
        seconds = run_threads(threads, calls, lambda t, i: log.append(f"item:c{t}-{i}", 0, [item]))
    finally:
        SqliteWriter.begin, SqliteWriter.commit = begin, commit  # type: ignore[method-assign]
        GroupCommit._lead = lead  # type: ignore[method-assign]
        log.close()
    return [b for b in batches if all(s in b for s in STEPS)], threads * calls / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Workdir()
    try:
        for run in range(args.runs):
            batches, rate = batch_steps(work, args.threads, args.calls)
            steady = batches[5:]
            if len(steady) < 2:
                raise SystemExit("too few batches to profile: raise --calls")

            def median(first: str, last: str, steady: list[Any] = steady) -> float:
                return statistics.median((b[last] - b[first]) * 1e6 for b in steady)

            cycle = statistics.median(
                (b["lead"] - a["lead"]) * 1e6 for a, b in itertools.pairwise(steady)
            )
            floor = RawGroupCommit(work.path(), args.threads)
            floor_s = run_threads(
                args.threads,
                args.calls,
                lambda t, i, floor=floor: floor.append(t, f"item:g{t}-{i}"),
            )
            floor.conn.close()
            print(
                f"run {run}: {rate:,.0f} events/s, {len(batches)} batches;"
                f" gather {median('lead', 'begin'):.0f} us, begin {median('begin', 'begun'):.0f},"
                f" works {median('begun', 'commit'):.0f}, commit"
                f" {median('commit', 'committed'):.0f}, wake {median('committed', 'end'):.0f},"
                f" cycle {cycle:.0f}; floor_cycle {floor_s / args.calls * 1e6:.0f} us"
                f" ({args.threads * args.calls / floor_s:,.0f} events/s)",
                flush=True,
            )
    finally:
        work.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
