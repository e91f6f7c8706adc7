"""``diff`` of two large logs, beside the floor SQLite sets on this machine.

``diff.seconds_late_divergence`` (two logs that part at their last event) and
``diff.seconds_early_divergence`` (two logs built apart: every row differs in its recorded time)
include opening both files. ``diff.seconds_compare_floor`` is SQLite alone comparing every
content column of the two late logs by position, one statement per core and nothing else, run
just before in the same process; ``ratio.diff_late_vs_compare_floor`` is that floor over the
late diff (1.0: diff costs no more than SQLite's compare of the rows).

    python -m bench.audit_diff --keep FOLDER [--events N] [--runs 3]

builds the three logs into FOLDER once (minutes at 10^6 events) and reuses them on later runs,
printing each figure's median.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import apsw

from bench.ready import build
from engine.audit import diff
from engine.audit.compare import CACHE_KIB, MMAP_BYTES
from engine.audit.source import CONTENT, ranges, uri
from engine.domain import MACHINES
from engine.domain.job import JobAccepted
from engine.log import open_log
from projections import default_projections

_DIFFERENT = " OR ".join(f"a.{c} IS NOT b.{c}" for c in (*CONTENT, "payload"))


def db(workspace: Path) -> Path:
    return workspace / ".foldline" / "foldline.db"


def append_one(path: Path, stream: str) -> None:
    log = open_log(path, MACHINES, default_projections())
    log.append(stream, 0, [JobAccepted(session="s")])
    log.close()


def build_pair(root: Path, n: int) -> tuple[Path, Path, Path]:
    """A (n events, then one more), "late" (A's first n events, then another one) and "early"
    (built apart from A: every recorded time differs, and every job's result)."""
    a, late, early = root / "a", root / "late", root / "early"
    build(a, n)
    build(early, n, result="different")
    shutil.copytree(a, late)
    append_one(db(a), "job:tail-a")
    append_one(db(late), "job:tail-late")
    return db(a), db(late), db(early)


def compare_floor(path_a: Path, path_b: Path) -> float:
    """Seconds for SQLite alone to compare every content column of two logs by position: one
    statement per core over its share of the positions, the files opened as diff opens them."""
    started = time.perf_counter()

    def count(lo: int, hi: int) -> int:
        conn = apsw.Connection(uri(path_a), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        try:
            # Two read-only opens of a WAL file at once can find its index being rebuilt:
            # wait as diff's connections do, instead of failing at once.
            conn.set_busy_timeout(10_000)
            conn.execute("ATTACH DATABASE ? AS b", (uri(path_b),))
            for schema in ("main", "b"):
                conn.execute(f"PRAGMA {schema}.mmap_size = {MMAP_BYTES}")
                conn.execute(f"PRAGMA {schema}.cache_size = -{CACHE_KIB}")
            sql = (
                "SELECT count(*) FROM main.events a JOIN b.events b USING (position)"
                f" WHERE a.position BETWEEN ? AND ? AND ({_DIFFERENT})"
            )
            return int(conn.execute(sql, (lo, hi)).fetchall()[0][0])
        finally:
            conn.close()

    conn = apsw.Connection(uri(path_a), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    head = int(conn.execute("SELECT max(position) FROM events").fetchall()[0][0])
    conn.close()
    shares = ranges(head, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=len(shares)) as pool:
        differing = sum(pool.map(lambda share: count(*share), shares))
    assert differing == 1, differing  # the late logs differ in their last event only
    return time.perf_counter() - started


def diff_figures(path_a: Path, late: Path, early: Path) -> dict[str, float]:
    floor_s = compare_floor(path_a, late)
    timings = {}
    for name, other in (("late", late), ("early", early)):
        started = time.perf_counter()
        result = diff(path_a, other)
        timings[name] = time.perf_counter() - started
        assert not result.identical
    return {
        "diff.seconds_compare_floor": floor_s,
        "diff.seconds_late_divergence": timings["late"],
        "diff.seconds_early_divergence": timings["early"],
        "ratio.diff_late_vs_compare_floor": floor_s / timings["late"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True, help="folder for the logs, reused")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    root = args.keep / str(args.events)
    paths = db(root / "a"), db(root / "late"), db(root / "early")
    if not all(path.is_file() for path in paths):
        shutil.rmtree(root, ignore_errors=True)
        paths = build_pair(root, args.events)
    runs = [diff_figures(*paths) for _ in range(args.runs)]
    for name in runs[0]:
        values = [run[name] for run in runs]
        shown = " ".join(f"{value:.3f}" for value in values)
        print(f"{name}: {statistics.median(values):.3f} ({shown})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
