"""The README's Python examples and diagrams are checked, so they cannot rot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# Examples that talk to a running server are exercised by the server tests instead
# (tests/http/test_a2a_sdk.py drives the same client calls; the coordination root runner is
# run as written by tests/http/test_coordination_server.py).
EXAMPLES = [
    block
    for block in re.findall(r"```python\n(.*?)```", README, flags=re.S)
    if "127.0.0.1" not in block and "FOLDLINE_URL" not in block
]


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_readme_python_example_runs(tmp_path: Path, index: int) -> None:
    script = tmp_path / "example.py"
    script.write_text(EXAMPLES[index])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    expected = (
        ["conflict", "capacity"]
        if index == 0
        else [
            "version_conflict 0 2",
            "('door:back',) 3 4",
            "door_stuck",
            "[('back', 'bo'), ('front', 'ana')]",
        ]
    )
    for line in expected:
        assert line in done.stdout


def test_readme_has_examples_and_shows_the_two_setup_commands() -> None:
    assert len(EXAMPLES) == 2
    assert "make serve" in README and "make test" in README


def test_readme_shows_every_machine_diagram_as_drawn_by_the_code() -> None:
    golden = (ROOT / "tests" / "golden" / "machines.mmd").read_text()
    for block in golden.split("%% ")[1:]:
        kind, _, body = block.partition("\n")
        assert f"```mermaid\n{body.rstrip()}\n```" in README, f"README diagram of {kind} is stale"


def test_readme_documents_every_cli_subcommand() -> None:
    from adapters.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in commands:
        assert f"foldline {name}" in README, f"README does not document foldline {name}"
