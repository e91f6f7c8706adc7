"""Checked-in logs of each released schema: current code must read them and say the same."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOGS = Path(__file__).parent / "logs"


def _cli(*args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "adapters.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    data = json.loads(done.stdout)
    data.pop("db", None)
    return done.returncode, data


def _expected(name: str) -> dict[str, Any]:
    return json.loads((LOGS / name).read_text())  # type: ignore[no-any-return]


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """Copies, so no reader ever leaves a -shm file beside the checked-in ones."""
    for db in LOGS.glob("*.db"):
        shutil.copy(db, tmp_path / db.name)
    return tmp_path


def test_golden_schema1_log_verifies_clean(logs: Path) -> None:
    assert _cli("verify", str(logs / "schema1.db")) == (0, _expected("schema1.verify.json"))


def test_golden_broken_log_fails_with_the_recorded_violations(logs: Path) -> None:
    code, report = _cli("verify", str(logs / "schema1-broken.db"))
    assert code == 1 and report == _expected("schema1-broken.verify.json")


def test_golden_state_and_diff_are_unchanged(logs: Path) -> None:
    assert _cli("state", str(logs / "schema1.db"), "--at", "10") == (
        0,
        _expected("schema1.state-at-10.json"),
    )
    assert _cli("diff", str(logs / "schema1.db"), str(logs / "schema1-fork.db"), "--json") == (
        1,
        _expected("schema1.diff-fork.json"),
    )
