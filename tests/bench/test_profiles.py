"""The profile scripts docs/benchmarks.md quotes beside ``bench.run`` run too, at tiny sizes:
``bench.full_floor`` (the floors of ``append_full_vs_raw``) must print every appender's rate,
ratio and latencies, ``bench.group_floor`` (the floor of ``group_commit_vs_single``) every
rate and ratio, ``bench.sync_gap`` every gap's COMMIT, rate and ratio, and
``bench.instructions`` a count per append, all as numbers.
The figures mean nothing at these sizes and are not judged."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys

import pytest

from bench.full_floor import APPENDERS
from tests.support.server import ROOT

FIGURE = re.compile(r"^(?P<key>[a-z][\w.]*): (?P<value>.+)$")


def figures(module: str, *arguments: str) -> dict[str, str]:
    """``python -m module arguments...``'s ``name: value`` lines; it must exit 0."""
    done = subprocess.run(
        [sys.executable, "-m", module, *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = map(FIGURE.match, done.stdout.splitlines())
    return {m["key"]: m["value"] for m in lines if m is not None}


def number(text: str) -> float:
    value = float(text)
    assert math.isfinite(value) and value > 0, text
    return value


def test_full_floor_prints_every_appender() -> None:
    printed = figures("bench.full_floor", "--events", "40", "--rounds", "1")
    for name in APPENDERS:
        number(printed[f"full_floor.{name}.events_per_s"])
        number(printed[f"ratio.full_floor.{name}_vs_raw"])
        if name != "raw":  # the raw baseline runs its own loop: only its rate is known
            latency = printed[f"full_floor.{name}.latency_us"]
            assert re.fullmatch(r"p50=\d+ p90=\d+ p99=\d+", latency), latency


def test_group_floor_prints_every_rate_and_ratio() -> None:
    printed = figures("bench.group_floor", "--threads", "2", "--calls", "5", "--rounds", "1")
    for name in ("guarded", "guarded_group", "single", "threads"):
        number(printed[f"group_floor.{name}.events_per_s"])
    for name in ("guarded_group_vs_guarded", "threads_vs_single", "threads_vs_guarded_group"):
        number(printed[f"ratio.group_floor.{name}"])


def test_sync_gap_prints_every_gap() -> None:
    printed = figures("bench.sync_gap", "--events", "20", "--rounds", "1", "--gaps", "0", "5")
    for gap in ("0us", "5us"):
        assert re.fullmatch(r"p50=\d+ mean=\d+", printed[f"sync_gap.{gap}.commit_us"])
        number(printed[f"sync_gap.{gap}.events_per_s"])
        number(printed[f"ratio.sync_gap.{gap}.commit_vs_no_gap"])


def test_sync_gap_refuses_gaps_that_do_not_start_at_zero() -> None:
    """Each gap's COMMIT is compared with the first gap's, named ``commit_vs_no_gap``."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.sync_gap", "--events", "5", "--gaps", "5", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "the first gap must be 0" in done.stderr
    assert done.stdout == ""


@pytest.mark.slow  # two processes under valgrind, about 12 s
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instructions_prints_a_count_per_append() -> None:
    """``bench.instructions`` under valgrind (``.ci/run`` installs it), one appender."""
    printed = figures("bench.instructions", "--events", "10", "--appenders", "append")
    assert number(printed["instructions.append.per_append"]) > 1000
    assert "ratio.instructions.append_vs_raw" not in printed  # no raw run, no ratio


def test_instructions_says_what_it_needs_without_valgrind() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.instructions", "--events", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": "/nonexistent"},
    )
    assert done.returncode == 2
    assert "needs valgrind" in done.stderr
    assert done.stdout == ""
