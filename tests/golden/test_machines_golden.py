"""A change to a machine declaration fails here until the golden copy is updated on purpose:

.venv/bin/foldline machines --json > tests/golden/machines.json
.venv/bin/foldline machines --mermaid > tests/golden/machines.mmd
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent


@pytest.mark.parametrize(
    ("flag", "golden"), [("--json", "machines.json"), ("--mermaid", "machines.mmd")]
)
def test_machines_output_matches_golden_copy(flag: str, golden: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "machines", flag],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    expected = (GOLDEN / golden).read_text()
    assert done.stdout == expected, (
        f"machine declarations changed: review, then regenerate tests/golden/{golden} "
        "(see this module's docstring)"
    )


def test_machines_json_lists_the_eight_machines_with_spec_states() -> None:
    import json

    machines = {m["kind"]: m for m in json.loads((GOLDEN / "machines.json").read_text())}
    assert sorted(machines) == [
        "audit",
        "job",
        "lease",
        "push",
        "result",
        "retention",
        "session",
        "task",
    ]
    assert machines["result"]["states"] == [
        "read",
        "accepted",
        "rejected",
        "integrating",
        "integrated",
    ]
    assert "suspended" in machines["session"]["states"]
    assert machines["task"]["states"][:2] == ["submitted", "working"]
