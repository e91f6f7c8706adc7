"""``foldline console DB``: the console over a log file, read-only, on a real gunicorn."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.domain import MACHINES
from engine.domain.job import JobAccepted, JobStarted
from engine.log import open_log
from projections import default_projections
from tests.support.backends import BACKENDS, log_target
from tests.support.console import get, serve_console
from tests.support.server import read_events

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.server


def _log(path: Path | str, jobs: int, first: int = 0) -> None:
    """Jobs ``j<first>``.. accepted and started: two events each."""
    log = open_log(path, MACHINES, default_projections())
    try:
        for i in range(first, first + jobs):
            log.append(f"job:j{i}", 0, [JobAccepted(session="s0"), JobStarted(run_id=f"r{i}")])
    finally:
        log.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_console_cli_serves_a_log_read_only_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    _log(db, 3)
    before = _digest(db)
    with serve_console(db) as port:
        status, raw = get(port, "/console/api/overview")
        assert status == 200
        view = json.loads(raw)
        assert view["read_only"] is True and view["head"] == 6
        assert view["counts"]["job"]["running"] == 3 and view["leases"] == []
        assert get(port, "/console/")[0] == 200
        assert get(port, "/v1/streams/job:j1/events")[0] == 200
        # No token at all (get sends none): it is open, and bound to loopback only.
        assert get(port, "/v1/events")[0] == 200 and get(port, "/console/api/log")[0] == 200
        for path in ("/v1/jobs/j1/cancel", "/invocations", "/"):
            assert get(port, path, "POST")[0] in (404, 405), path  # no writer is mounted
        assert get(port, "/ping")[0] == 404
    assert _digest(db) == before  # no lease, no recovery, no migration, no checkpoint


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_console_cli_follows_commits_made_by_another_process(tmp_path: Path, backend: str) -> None:
    db = log_target(backend, tmp_path)
    _log(db, 1)
    with serve_console(db) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/v1/events?after=2", headers={"Accept": "text/event-stream"})
        events = read_events(conn.getresponse(), limit=30)
        assert next(events) == {"comment": "following"}
        _log(db, 1, first=1)  # another process writes positions 3 and 4
        seen = next((e for e in events if "id" in e), None)
        conn.close()
    assert seen is not None and seen["id"] == "3" and seen["event"] == "job.accepted"


def test_console_cli_refuses_a_file_that_is_not_a_log_with_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"definitely not sqlite" * 200)
    done = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "console", str(bogus)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert done.returncode == 2
    assert done.stderr.startswith("foldline: not_a_log:")
    assert len(done.stderr.strip().splitlines()) == 1
    bad_bind = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "console", str(bogus), "--bind", "nowhere"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad_bind.returncode == 2 and "HOST:PORT" in bad_bind.stderr


@pytest.mark.parametrize("bind", ["0.0.0.0:8081", "192.0.2.7:8081", "[::]:8081", "example.com:81"])
def test_console_cli_asks_no_token_so_it_refuses_a_non_loopback_bind(
    tmp_path: Path, bind: str
) -> None:
    db = tmp_path / "audit.db"
    _log(db, 1)
    done = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "console", str(db), "--bind", bind],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "loopback" in lines[0] and bind in lines[0], lines


def test_console_cli_loopback_binds_are_accepted() -> None:
    from adapters.programs.console_server import check_loopback

    for bind in ("127.0.0.1:8081", "127.0.0.2:1", "[::1]:8081", "localhost:8081"):
        assert check_loopback(bind) == bind
