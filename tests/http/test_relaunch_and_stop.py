"""Relaunch of paused-and-gone and suspended jobs, session continue, and graceful stop,
through a real ``foldline serve`` (issue 14, item 5)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adapters.system.processes import is_alive, start_token
from tests.support.agents import python_agent, workspace_with_agents
from tests.support.server import Server, serve

pytestmark = pytest.mark.server

# First run: waits (to be paused and killed); a resumed run answers at once.
RESUMABLE = (
    'if [ "$FOLDLINE_RESUMED" = 1 ]; then cat; echo; echo resumed; '
    "else echo ready; cat >/dev/null; sleep 30; fi"
)
POLITE = """
import signal, sys, time
def bye(*_):
    print("bye", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
sys.stdin.read()
for _ in range(600):
    time.sleep(0.1)
"""
STUBBORN = 'trap "" TERM; echo ready; cat >/dev/null; sleep 30'


def _json(server: Server, method: str, path: str, body: Any = None) -> Any:
    status, _, raw = server.request(
        method, path, body, {"Content-Type": "application/json"}, timeout=90
    )
    return status, json.loads(raw)


def _until(server: Server, job_id: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The job once ``done(row)``: each round blocks on the log (/v1/jobs/wait), 40 rounds."""
    for _ in range(40):
        _, row = _json(server, "GET", f"/v1/jobs/{job_id}")
        if done(row):
            return row  # type: ignore[no-any-return]
        _json(server, "GET", f"/v1/jobs/wait?ids={job_id}&timeout=2")
    raise AssertionError(f"job {job_id} never got there: {row}")


def _said_ready(server: Server, job_id: str) -> Callable[[dict[str, Any]], bool]:
    def check(row: dict[str, Any]) -> bool:
        _, page = _json(server, "GET", f"/v1/streams/job:{job_id}/events")
        return any("ready" in e["event"].get("text", "") for e in page["events"])

    return check


def _start(server: Server, session: str) -> str:
    status, body = _json(
        server, "POST", "/invocations", {"prompt": "task", "session": session, "async": True}
    )
    assert status == 200, body
    job_id: str = body["invocation"]
    _until(server, job_id, _said_ready(server, job_id))
    return job_id


def _kill_run(row: dict[str, Any]) -> None:
    """SIGKILL the run's group, and return once the kernel says its leader is dead (a zombie
    counts: it runs nothing); bounded at 5 s."""
    os.killpg(row["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while is_alive(row["pid"], start_token(row["pid"])):
        assert time.monotonic() < deadline, "the killed run did not die"
        time.sleep(0.01)


def test_session_continue_relaunches_a_paused_job_whose_process_is_gone(tmp_path: Path) -> None:
    with serve(tmp_path, {"FOLDLINE_RUNNER": RESUMABLE}) as server:
        job_id = _start(server, "s1")
        status, session = _json(server, "POST", "/v1/sessions/s1/pause")
        assert status == 200 and session["state"] == "paused", session
        row = _until(server, job_id, lambda r: r["state"] == "paused")
        _kill_run(row)
        status, session = _json(server, "POST", "/v1/sessions/s1/continue")
        assert status == 200, session
        row = _until(server, job_id, lambda r: r["state"] == "ok")
        assert row["runs"] == 2 and row["result"].rstrip().endswith("resumed"), row


def test_job_continue_relaunches_a_paused_gone_job_with_its_input(tmp_path: Path) -> None:
    with serve(tmp_path, {"FOLDLINE_RUNNER": RESUMABLE}) as server:
        job_id = _start(server, "s1")
        assert _json(server, "POST", f"/v1/jobs/{job_id}/pause")[0] == 200
        row = _until(server, job_id, lambda r: r["state"] == "paused")
        _kill_run(row)
        status, row = _json(server, "POST", f"/v1/jobs/{job_id}/continue", {"input": "and more"})
        assert status == 200, row
        row = _until(server, job_id, lambda r: r["state"] == "ok")
        # the job's whole output (ADR 0049): the first run's, then the resumed run's
        assert row["result"].splitlines()[:4] == ["ready", "task", "", "and more"]
        assert "and more" in row["result"] and row["runs"] == 2


def test_graceful_stop_waits_for_a_polite_job_and_cancels_a_stubborn_one(tmp_path: Path) -> None:
    workspace, agents = workspace_with_agents(
        tmp_path,
        {"polite.py": POLITE},
        {"polite": f"exec {python_agent('polite.py')}", "stubborn": STUBBORN},
    )
    env = {
        "FOLDLINE_RUNNER": "cat",
        "FOLDLINE_AGENTS_FILE": str(agents),
        "FOLDLINE_STOP_GRACE_S": "2",
    }
    with serve(workspace, env) as server:
        _json(server, "POST", "/invocations", {"prompt": "hi", "session": "s1"})
        status, body = _json(
            server,
            "POST",
            "/v1/jobs",
            {
                "session": "s1",
                "jobs": [{"agent": "polite", "prompt": "p"}, {"agent": "stubborn", "prompt": "s"}],
            },
        )
        assert status == 201, body
        polite, stubborn = (j["job_id"] for j in body["jobs"])
        for job_id in (polite, stubborn):
            _until(server, job_id, _said_ready(server, job_id))
        status, session = _json(server, "POST", "/v1/sessions/s1/stop", {"reason": "done"})
        assert status == 200 and session["state"] == "stopped", session
        _, row = _json(server, "GET", f"/v1/jobs/{polite}")
        assert row["state"] == "ok" and "bye" in row["result"], row
        row = _until(server, stubborn, lambda r: r["state"] == "cancelled")
        assert row["reason"] == "done: the graceful stop's grace of 2 s ended", row
