"""Every case of ``bench.run`` runs in the suite, at tiny sizes, so that a benchmark breaks the
build the day it breaks rather than the day someone next measures.

One ``python -m bench.run --tiny --runs 1`` per module, exactly as ``make bench-quick`` runs
the cases (the same command, the sizes aside): a case fails here when it raises, when it prints
no figure, and the run fails when a figure that docs/benchmarks.md's table names is no longer
printed by any case. The figures themselves mean nothing at these sizes and are not judged.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from bench.run import TINY, cases
from tests.support.server import ROOT

# One run of the whole bench for the module (a file runs in one xdist worker); it judges no
# figure, so the load beside it cannot fail it.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.server,  # the http, invocation, ready and memory cases start gunicorn
]

CASES = list(cases(TINY))
DOCS = ROOT / "docs" / "benchmarks.md"
# Names in the docs' table that bench.run does not print, and what prints them instead.
PRINTED_ELSEWHERE = {
    "console.first_render_ms": ROOT / "tests" / "browser" / "test_console_pages.py"
}
FIGURE = re.compile(r"^(?P<key>[a-z][\w.]*): (?P<value>\S+)$")
RUN_LIMIT_S = 600  # about 30 s on an idle 2-core box; the bound is for a box under load


@dataclass
class Run:
    """What one ``bench.run`` printed, figure lines grouped by the case that printed them."""

    returncode: int
    output: str
    figures: dict[str, dict[str, str]] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)

    def tail(self) -> str:
        return "\n".join(self.output.splitlines()[-40:])


def parse(returncode: int, output: str) -> Run:
    """Group the stdout figures by the ``case: NAME`` / ``case NAME took`` lines that
    ``bench.run`` writes to stderr around each case (both streams merged, in order)."""
    run, current = Run(returncode, output), None
    for line in output.splitlines():
        if line.startswith("case: "):
            current = line.removeprefix("case: ").strip()
            run.figures[current] = {}
        elif current and line.startswith(f"case {current} took "):
            run.finished.add(current)
            current = None
        elif current and (figure := FIGURE.match(line)):
            run.figures[current][figure["key"]] = figure["value"]
    return run


@pytest.fixture(scope="module")
def tiny_run() -> Iterator[Run]:
    completed = subprocess.run(
        [sys.executable, "-m", "bench.run", "--tiny", "--runs", "1"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=RUN_LIMIT_S,
    )
    yield parse(completed.returncode, completed.stdout)


def documented_names() -> list[tuple[str, list[str]]]:
    """Each row of the table in docs/benchmarks.md: its first name, and any short names after
    it in the same cell (``http.sync_p50_ms`` / ``p99_ms``: ``p99_ms`` is ``http.sync_p99_ms``)."""
    rows = []
    for line in DOCS.read_text().splitlines():
        if not line.startswith("| `"):
            continue
        first_cell = line.split("|")[1]
        names = re.findall(r"`([^`]+)`", first_cell)
        rows.append((names[0], names[1:]))
    assert rows, f"no table of figures found in {DOCS}"
    return rows


def _shape(name: str) -> str:
    """A name with its sizes made general: ``ready_1e6_vs_1e4`` and ``ready_1e3_vs_1e2``, or
    ``threads16`` and ``threads8``, are the same figure at other sizes."""
    return re.sub(r"\d+", "#", name.removeprefix("ratio."))


def is_printed(name: str, keys: set[str]) -> bool:
    """The docs' ``name`` is a printed key, with or without ``ratio.``, or a family of keys
    by size (``time_to_ready`` for ``time_to_ready.100``)."""
    wanted = _shape(name)
    return any(_shape(key) == wanted or _shape(key).startswith(wanted + ".") for key in keys)


def is_printed_beside(first: str, short: str, keys: set[str]) -> bool:
    """A short name in the cell of ``first``: a key of the same namespace ending in it."""
    namespace = first.rpartition(".")[0] + "."
    return any(k.startswith(namespace) and k.endswith(("_" + short, "." + short)) for k in keys)


def test_bench_run_tiny_exits_zero(tiny_run: Run) -> None:
    assert tiny_run.returncode == 0, tiny_run.tail()


@pytest.mark.parametrize("case", CASES)
def test_bench_case_prints_figures(tiny_run: Run, case: str) -> None:
    assert case in tiny_run.figures, f"{case} never started:\n{tiny_run.tail()}"
    assert case in tiny_run.finished, f"{case} did not finish:\n{tiny_run.tail()}"
    figures = tiny_run.figures[case]
    assert figures, f"{case} printed no figure:\n{tiny_run.tail()}"
    for key, value in figures.items():
        assert math.isfinite(float(value)), f"{case} printed {key}: {value}"


def test_bench_prints_every_figure_the_docs_name(tiny_run: Run) -> None:
    keys = {key for figures in tiny_run.figures.values() for key in figures}
    missing = []
    for first, shorts in documented_names():
        if first in PRINTED_ELSEWHERE:
            assert first in PRINTED_ELSEWHERE[first].read_text(), f"nothing prints {first}"
            continue
        if not is_printed(first, keys):
            missing.append(first)
        missing += [short for short in shorts if not is_printed_beside(first, short, keys)]
    assert not missing, f"docs/benchmarks.md names figures no case prints: {missing}"


def test_bench_doc_names_match_by_shape() -> None:
    """The matching rules the test above relies on, on names from the table."""
    keys = {"ratio.ready_1e3_vs_1e2", "time_to_ready.100", "http.sync_p99_ms", "ratio.x_vs_y"}
    assert is_printed("ready_1e6_vs_1e4", keys)
    assert is_printed("time_to_ready", keys)
    assert is_printed("x_vs_y", keys)
    assert not is_printed("time_to", keys)
    assert not is_printed("x_vs_z", keys)
    assert is_printed_beside("http.sync_p50_ms", "p99_ms", keys)
    assert not is_printed_beside("http.sync_p50_ms", "per_s", keys)
