"""Audit speed on large logs: ``verify.events_per_s`` (the whole verify: chain, legality by
replay, projections equal to a fresh fold), ``ratio.verify_vs_chain_floor`` (verify's rate over
a plain one-process loop that scans the same rows and recomputes the chain, run just before),
``export.events_per_s``, and ``diff`` of two logs that part near the end
(``diff.seconds_late_divergence``) or near the start (``diff.seconds_early_divergence``). Every
figure includes opening the inputs, which are read in place."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.ready import build
from engine import chain
from engine.audit import diff, export_line, reading, verify
from engine.domain import MACHINES
from engine.domain.job import JobAccepted
from engine.log import open_log
from projections import default_projections


def _db(workspace: Path) -> Path:
    return workspace / ".foldline" / "foldline.db"


def _append(db: Path, stream: str) -> None:
    log = open_log(db, MACHINES, default_projections())
    log.append(stream, 0, [JobAccepted(session="s")])
    log.close()


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
        _append(_db(a), "job:tail-a")
        _append(_db(late), "job:tail-late")
        timings = {}
        for name, other in (("late", late), ("early", early)):
            started = time.perf_counter()
            result = diff(_db(a), _db(other))
            timings[name] = time.perf_counter() - started
            assert not result.identical
    return {
        "audit.events": float(n),
        "chain_floor.events_per_s": n / floor_s,
        "verify.events_per_s": n / verify_s,
        "ratio.verify_vs_chain_floor": floor_s / verify_s,
        "export.events_per_s": n / export_s,
        "diff.seconds_late_divergence": timings["late"],
        "diff.seconds_early_divergence": timings["early"],
    }
