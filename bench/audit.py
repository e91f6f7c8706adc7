"""Audit speed on large logs: ``verify.events_per_s``, ``export.events_per_s``, and ``diff``
of two logs that part near the end (``diff.seconds_late_divergence``) or near the start
(``diff.seconds_early_divergence``). Each figure includes copying the inputs (the audits work
on private copies) and opening them."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.ready import build
from engine.audit import diff, export_line, open_audit, verify
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


def bench_audit(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="foldline-audit-bench-") as folder:
        root = Path(folder)
        a, early = root / "a", root / "early"
        build(a, n)
        build(early, n, result="different")  # parts from A at the first finished job
        started = time.perf_counter()
        with open_audit(_db(a), MACHINES, default_projections(), writable=True) as log:
            violations = verify(log)
        verify_s = time.perf_counter() - started
        assert not violations, violations[:3]
        started = time.perf_counter()
        with open_audit(_db(a), MACHINES, default_projections()) as log:
            exported = sum(len(export_line(row)) for row in log.iter_rows())
        export_s = time.perf_counter() - started
        assert exported
        late = root / "late"
        shutil.copytree(a, late)
        _append(_db(a), "job:tail-a")
        _append(_db(late), "job:tail-late")
        timings = {}
        for name, other in (("late", late), ("early", early)):
            started = time.perf_counter()
            with (
                open_audit(_db(a), MACHINES, default_projections()) as left,
                open_audit(_db(other), MACHINES, default_projections()) as right,
            ):
                result = diff(left, right)
            timings[name] = time.perf_counter() - started
            assert not result.identical
    return {
        "audit.events": float(n),
        "verify.events_per_s": n / verify_s,
        "export.events_per_s": n / export_s,
        "diff.seconds_late_divergence": timings["late"],
        "diff.seconds_early_divergence": timings["early"],
    }
