"""The profile scripts docs/benchmarks.md quotes beside ``bench.run`` run too, at tiny sizes:
``bench.full_floor`` (the floors of ``append_full_vs_raw``) must print every appender's rate,
ratio and latencies as numbers. The figures mean nothing at these sizes and are not judged."""

from __future__ import annotations

import math
import re
import subprocess
import sys

from bench.full_floor import APPENDERS
from tests.support.server import ROOT

FIGURE = re.compile(r"^(?P<key>[a-z][\w.]*): (?P<value>.+)$")


def test_full_floor_prints_every_appender() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.full_floor", "--events", "40", "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = {
        m["key"]: m["value"] for m in map(FIGURE.match, done.stdout.splitlines()) if m is not None
    }
    for name in APPENDERS:
        for key in (f"full_floor.{name}.events_per_s", f"ratio.full_floor.{name}_vs_raw"):
            assert math.isfinite(float(figures[key])) and float(figures[key]) > 0, key
        if name != "raw":  # the raw baseline runs its own loop: only its rate is known
            latency = figures[f"full_floor.{name}.latency_us"]
            assert re.fullmatch(r"p50=\d+ p90=\d+ p99=\d+", latency), latency
