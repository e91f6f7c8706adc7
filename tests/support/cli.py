"""The ``foldline`` command line as a real subprocess, for tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def foldline(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``foldline ARGS`` from the checkout (after ``prefix``, e.g. ``nsenter ... --``); its
    exit code is the caller's to check."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "adapters.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def boot_refusal(workspace: Path, setting: str, value: Path) -> str:
    """Serve ``workspace`` with the one ``setting`` set to ``value``; the boot must fail and
    say why on exactly one line, which is returned."""
    workspace.mkdir(exist_ok=True)
    done = foldline(
        "serve", "--workspace", str(workspace), env={setting: str(value), "PATH": "/usr/bin:/bin"}
    )
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert setting in lines[0], lines
    return lines[0]
