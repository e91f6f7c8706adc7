from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine import open_log
from projections import default_projections
from tests.support.tickets import MACHINES, TicketOpened

ROOT = Path(__file__).resolve().parents[2]


def _foldline(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapters.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_cli_serve_opens_the_workspace_log_and_prints_its_head(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    db = workspace / ".foldline" / "foldline.db"
    log = open_log(db, MACHINES, default_projections())
    log.append("ticket:a", 0, [TicketOpened()])
    log.close()
    done = _foldline("serve", "--workspace", str(workspace))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"db": str(db), "schema": 1, "head": 1, "sync": "full"}
    assert "not implemented yet" in done.stderr


def test_cli_serve_refuses_a_file_that_is_not_a_log_with_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"definitely not sqlite" * 200)
    done = _foldline("serve", "--db", str(bogus))
    assert done.returncode == 2
    assert done.stderr.startswith("foldline: not_a_log:")
    assert "Traceback" not in done.stderr


def test_cli_help_of_every_subcommand_ends_with_an_example() -> None:
    done = _foldline("serve", "--help")
    assert done.returncode == 0
    assert done.stdout.strip().splitlines()[-1].startswith("example: foldline serve")
