"""``foldline serve``'s boot warns, on one line, when the agent card would name the container's
own origin: ``FOLDLINE_PUBLIC_URL`` unset on a bind other callers reach. The bind is a
documentation address (192.0.2.0/24) no interface has: the server boots, prints, and never
listens on a network."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.server import ROOT, free_port

pytestmark = pytest.mark.server

UNSET = "foldline: warning: FOLDLINE_PUBLIC_URL is unset"


def _boot(tmp_path: Path, bind: str, env: dict[str, str]) -> tuple[str, list[str]]:
    """Start ``foldline serve`` on ``bind`` and stop it once its boot line is out: that line,
    and the lines stderr had before it (every boot warning is printed ahead of it)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "adapters.cli", "serve", "--workspace", str(workspace)],
        cwd=ROOT,
        env={
            **os.environ,
            "FOLDLINE_STATE_DIR": str(tmp_path / "state"),
            "FOLDLINE_TOKEN": "test-operator-token",
            "FOLDLINE_BIND": bind,
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        ready, _, _ = select.select([process.stdout], [], [], 30)
        assert ready, "no boot line within 30 s"
        boot = process.stdout.readline().decode()
        os.set_blocking(process.stderr.fileno(), False)
        before = (process.stderr.read() or b"").decode()
    finally:
        process.kill()  # nothing is open yet: no log, no listening socket
        process.wait(timeout=30)
        process.stdout.close()
        process.stderr.close()
    return boot, before.splitlines()


def test_serve_warns_once_when_the_card_would_name_its_own_origin(tmp_path: Path) -> None:
    bind = f"192.0.2.7:{free_port()}"
    boot, stderr = _boot(tmp_path, bind, {"FOLDLINE_PUBLIC_URL": ""})
    assert f'"bind": "{bind}"' in boot
    warnings = [line for line in stderr if line.startswith(UNSET)]
    assert len(warnings) == 1, stderr
    assert f"{bind} is not a loopback bind" in warnings[0]
    assert "result files go inline only" in warnings[0]


def test_serve_does_not_warn_with_a_public_url(tmp_path: Path) -> None:
    bind = f"192.0.2.7:{free_port()}"
    boot, stderr = _boot(tmp_path, bind, {"FOLDLINE_PUBLIC_URL": "https://agent.example"})
    assert f'"bind": "{bind}"' in boot
    assert not [line for line in stderr if "FOLDLINE_PUBLIC_URL" in line], stderr
