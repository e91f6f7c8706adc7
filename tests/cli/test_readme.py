"""The README's Python example is code: run it, so it cannot rot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_python_example_runs(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README.md has no python example"
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
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
    assert "version_conflict 0 2" in done.stdout
    assert (tmp_path / "demo" / ".foldline" / "foldline.db").exists()


def test_readme_shows_the_two_setup_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make serve" in text and "make test" in text
