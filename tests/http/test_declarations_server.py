"""A built-in machine revised between two runs of a real server (ADR 0060): the log records
the declarations of each run before its first event and verifies by them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import foldline
from tests.support.server import serve

pytestmark = [pytest.mark.server, pytest.mark.slow]

REVISED = "tests.support.machine_versions:LEASE_KEPT"


def test_server_runs_under_two_lease_revisions_leave_a_log_that_verifies(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    db = workspace / ".foldline" / "foldline.db"
    with serve(workspace, {"FOLDLINE_RUNNER": "cat"}) as server:
        assert server.invoke({"prompt": "first run"})[0] == 200
    # The first run's graceful stop released the lease: the revision refuses lease.released.
    with serve(workspace, {"FOLDLINE_RUNNER": "cat", "FOLDLINE_MACHINES": REVISED}) as server:
        assert server.invoke({"prompt": "second run"})[0] == 200
    rows = [json.loads(line) for line in foldline("export", str(db)).stdout.splitlines()]
    declared = [r for r in rows if r["stream_id"] == "log:declarations"]
    assert len(declared) == 2 and declared[0]["position"] == 1
    assert declared[0]["event"]["digest"] != declared[1]["event"]["digest"]
    released = next(r["position"] for r in rows if r["event_type"] == "lease.released")
    second = declared[1]["position"]
    assert released < second and rows[second]["event_type"] == "lease.acquired"
    done = foldline("verify", str(db), "--machines", REVISED)
    assert done.returncode == 0 and json.loads(done.stdout)["ok"], done.stdout
    done = foldline("replay", str(db), "--with", REVISED)
    assert done.returncode == 1, done.stdout
    assert json.loads(done.stdout)["machines"]["lease"]["position"] == released
    # state, diff and rebuild judge by the record too: run 1's release is accepted, and the
    # refold gives the very tables the two runs wrote.
    done = foldline("state", str(db), "--machines", REVISED)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["log:declarations"]["version"] == 2
    copy = tmp_path / "copy.db"
    assert foldline("copy", str(db), str(copy)).returncode == 0
    done = foldline("diff", str(db), str(copy), "--json", "--machines", REVISED)
    assert done.returncode == 0 and json.loads(done.stdout)["judged"] == {"a": [], "b": []}
    done = foldline("rebuild", str(db), "--machines", REVISED)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["changed"] == [], done.stdout
