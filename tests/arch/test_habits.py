"""The habits CI enforces are written down where CI reads them, so they cannot quietly lapse."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_habits_ci_lints_before_it_tests() -> None:
    steps = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip().startswith("make ")
    ]
    assert steps == ["make lint", "make test"]


def test_habits_lint_is_ruff_check_format_check_and_mypy() -> None:
    makefile = (ROOT / "Makefile").read_text()
    lint = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "ruff check" in lint and "ruff format --check" in lint and "mypy" in lint


def test_habits_mypy_is_strict_on_every_package_with_real_library_types() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True
    assert set(config["files"]) == {"engine", "projections", "adapters"}
    ignored = [
        m
        for o in config.get("overrides", [])
        for m in o["module"]
        if o.get("ignore_missing_imports")
    ]
    assert not [m for m in ignored if m.split(".")[0] in {"apsw", "transitions"}]
    lenient = [
        m for o in config.get("overrides", []) for m in o["module"] if o.get("ignore_errors")
    ]
    assert not lenient, f"mypy errors ignored in {lenient}"


def test_habits_test_fast_leaves_out_crash_server_and_slow() -> None:
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(r"\ntest-fast:.*\n\t(.+)\n", makefile)
    assert match is not None
    assert '-m "not crash and not server and not slow"' in match.group(1)


def test_habits_a_test_file_that_starts_gunicorn_is_marked_server() -> None:
    """``make test-fast`` leaves the ``server`` mark out: a file serving through
    ``tests.support.server.serve`` without it runs real gunicorn in the edit loop."""
    serving = re.compile(r"from tests\.support\.server import[^\n]*\bserve\b")
    unmarked = [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        if serving.search(text := path.read_text()) and "pytest.mark.server" not in text
    ]
    assert unmarked == []
