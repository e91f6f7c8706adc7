"""foldline benchmarks: figures and ratios against baselines measured in the same process.

    python -m bench.run [--quick] [--runs N] [--only NAME ...]

Each ratio is computed inside one run (baseline and engine back to back on the same machine
state) and the median over runs is printed, since absolute times on a shared 2-core box move by
+-30 % while ratios hold. Output is ``name: value`` lines; ratios are ``ratio.<name>: <float>``.
This module only composes the cases, by name and size; each is measured in its own module, with
what they share in ``bench.common``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import apsw

from bench import postgres
from bench.audit import bench_audit
from bench.audit_since import bench_audit_since
from bench.channel import bench_channel
from bench.common import Workdir
from bench.console import bench_console
from bench.http_load import bench_http
from bench.invocation import bench_invocation
from bench.log import (
    bench_append,
    bench_eventsourcing,
    bench_group_commit,
    bench_job_lifecycle,
    bench_rebuild,
)
from bench.memory import bench_memory
from bench.proofs import bench_proofs
from bench.push import bench_push
from bench.ready import bench_ready
from bench.writers import bench_writers

QUICK: dict[str, Any] = {
    "full": 1500,
    "normal": 4000,
    "group": 3200,
    "rebuild": 100_000,
    "es": 600,
    "jobs": 300,
    "http_s": 3,
    "ready": (1_000, 10_000, 100_000),
    "audit": 30_000,
    "audit_since": (30_000, 1_000),
    "console": 10_000,
    "sync_s": 3,
    "memory": (10_000, 100_000),
    "pg_append": 300,
    "pg_group": 1600,
    "pg_rebuild": 50_000,
    "writers": 200,
    "channel": 300,
    "push": 300,
    "proofs": 60_000,
}

FULL: dict[str, Any] = {
    "full": 4000,
    "normal": 12_000,
    "group": 9600,
    "rebuild": 1_000_000,
    "es": 3000,
    "jobs": 1500,
    "http_s": 8,
    "ready": (10_000, 100_000, 1_000_000),
    "audit": 1_000_000,
    "audit_since": (1_000_000, 10_000),
    "console": 100_000,
    "sync_s": 8,
    "memory": (10_000, 1_000_000),
    "pg_append": 3000,
    "pg_group": 9600,
    "pg_rebuild": 300_000,
    "writers": 2000,
    "channel": 1000,
    "push": 1000,
    "proofs": 1_000_000,
}

# The smoke test's sizes (tests/bench): every case end to end in seconds, its figures
# meaningless. The console's case pages 21 deep at 50 jobs a page; the logs the ratios compare
# keep their order of size so that the ratios keep their names' shape.
TINY: dict[str, Any] = {
    "full": 40,
    "normal": 80,
    "group": 160,
    "rebuild": 2000,
    "es": 48,
    "jobs": 20,
    "http_s": 0.5,
    "ready": (100, 1_000),
    "audit": 2000,
    "audit_since": (2000, 100),
    "console": 1100,
    "sync_s": 0.5,
    "memory": (100, 1_000),
    "pg_append": 20,
    "pg_group": 160,
    "pg_rebuild": 1000,
    "writers": 60,  # each of the 10 cycles edits 5 files of its own
    "channel": 20,
    "push": 20,
    "proofs": 1000,
}
SIZES = {"full": FULL, "quick": QUICK, "tiny": TINY}


def cases(sizes: dict[str, Any]) -> dict[str, Callable[[Workdir], dict[str, float]]]:
    """Every case by name, each measuring at ``sizes``."""
    named: dict[str, Callable[[Workdir], dict[str, float]]] = {
        "append_full": lambda w: bench_append(w, sizes["full"], "full"),
        "append_normal": lambda w: bench_append(w, sizes["normal"], "normal"),
        "group_commit": lambda w: bench_group_commit(w, sizes["group"]),
        "rebuild": lambda w: bench_rebuild(w, sizes["rebuild"]),
        "eventsourcing": lambda w: bench_eventsourcing(w, sizes["es"]),
        "job_lifecycle": lambda w: bench_job_lifecycle(w, sizes["jobs"]),
        "http": lambda w: bench_http(sizes["http_s"]),
        "invocation": lambda w: bench_invocation(sizes["sync_s"]),
        "ready": lambda w: bench_ready(sizes["ready"], 1),
        "audit": lambda w: bench_audit(sizes["audit"]),
        "audit_since": lambda w: bench_audit_since(*sizes["audit_since"]),
        "console": lambda w: bench_console(sizes["console"], 11),
        "memory": lambda w: bench_memory(sizes["memory"]),
        "writers": lambda w: bench_writers(sizes["writers"], 10),
        "channel": lambda w: bench_channel(sizes["channel"]),
        "push": lambda w: bench_push(sizes["push"]),
        "proofs": lambda w: bench_proofs(sizes["proofs"]),
    }
    named.update(postgres.cases(sizes))
    return named


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, well under 60 s")
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="smoke-test sizes: each case runs, its figures mean little",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    named = cases(SIZES[mode])
    unknown = sorted(set(args.only or ()) - set(named))
    if unknown:
        parser.error(f"no case named {', '.join(unknown)}; the cases: {', '.join(named)}")
    print(
        f"machine: {os.cpu_count()} cpus, {platform.machine()}, python "
        f"{platform.python_version()}, sqlite {apsw.sqlite_lib_version()}, apsw "
        f"{apsw.apsw_version()}"
    )
    print(f"mode: {mode}, runs: {args.runs} (median)")
    for name, case in named.items():
        if args.only and name not in args.only:
            continue
        # One run where a run builds a large log; the quick mode must stay near a minute.
        runs = (
            1
            if name in ("audit", "audit_since", "console", "memory", "proofs")
            or (name in ("rebuild", "ready", "http", "invocation", "pg_rebuild") and mode != "full")
            else (args.runs)
        )
        # Progress on stderr, so that stdout stays ``name: value`` lines; the smoke test reads
        # these lines to tell which case printed (or failed to print) which figure.
        print(f"case: {name}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        results: dict[str, list[float]] = {}
        for _ in range(runs):
            work = Workdir()
            try:
                for key, value in case(work).items():
                    results.setdefault(key, []).append(value)
            finally:
                work.close()
        for key, values in results.items():
            median = statistics.median(values)
            shown = (
                f"{median:.0f}"
                if median >= 100 and not key.startswith("ratio.")
                else (f"{median:.3f}")
            )
            print(f"{key}: {shown}", flush=True)
        print(
            f"case {name} took {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
