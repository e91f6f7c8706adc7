"""Audit speed on large logs: ``verify.events_per_s`` (the whole verify: chain, legality by
replay, projections equal to a fresh fold), ``ratio.verify_vs_chain_floor`` (verify's rate over
a plain one-process loop that scans the same rows and recomputes the chain, run just before),
``export.events_per_s``, and ``diff`` of two logs that part near the end
(``diff.seconds_late_divergence``) or near the start (``diff.seconds_early_divergence``) beside
SQLite's own compare of the rows (``bench.audit_diff``). Every figure includes opening the
inputs, which are read in place."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.audit_diff import append_one, diff_figures
from bench.ready import build
from engine import chain
from engine.audit import export_line, reading, verify
from engine.domain import MACHINES
from projections import default_projections


def _db(workspace: Path) -> Path:
    return workspace / ".foldline" / "foldline.db"


def chain_floor(db: Path) -> float:
    """Seconds for the plainest chain check: one process, one scan, one link per row."""
    started = time.perf_counter()
    with reading(db) as reader:
        broken = list(chain.check_rows(reader.iter_rows()))
    assert not broken, broken[:3]
    return time.perf_counter() - started


def bench_audit(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="foldline-audit-bench-") as folder:
        root = Path(folder)
        a, early = root / "a", root / "early"
        build(a, n)
        build(early, n, result="different")  # parts from A at the first finished job
        floor_s = chain_floor(_db(a))
        started = time.perf_counter()
        report = verify(_db(a), MACHINES, default_projections())
        verify_s = time.perf_counter() - started
        assert report.ok, report.violations[:3]
        started = time.perf_counter()
        with reading(_db(a)) as reader:
            exported = sum(len(export_line(row)) for row in reader.iter_rows())
        export_s = time.perf_counter() - started
        assert exported
        late = root / "late"
        shutil.copytree(a, late)
        append_one(_db(a), "job:tail-a")
        append_one(_db(late), "job:tail-late")
        figures = diff_figures(_db(a), _db(late), _db(early))
    return {
        "audit.events": float(n),
        "chain_floor.events_per_s": n / floor_s,
        "verify.events_per_s": n / verify_s,
        "ratio.verify_vs_chain_floor": floor_s / verify_s,
        "export.events_per_s": n / export_s,
        **figures,
    }
