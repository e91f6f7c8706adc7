"""``/ping`` answers for the whole server, not for the worker that happens to answer (ADR 0031):
AgentCore reaps a session it believes idle, so a run in one worker must keep every worker's
answer ``HealthyBusy``."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from adapters.services.busy import BusyBoard
from tests.support.server import Server, poll_invocation, serve

pytestmark = pytest.mark.server

# Runs until the test creates ./go in the workspace (bounded to 30 s): no timing guesses.
GATED = "cat >/dev/null; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"


def _ping(server: Server) -> tuple[str, int, str]:
    """One ping on a new connection (so gunicorn hands it to any worker)."""
    status, headers, raw = server.request("GET", "/ping", timeout=5)
    assert status == 200
    body = json.loads(raw)
    return body["status"], body["time_of_last_update"], headers["x-foldline-worker"]


def test_ping_is_busy_whichever_worker_answers_and_idle_soon_after(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_RUNNER": GATED}, workers=2) as server:
        before, started_at, _ = _ping(server)
        assert before == "Healthy"
        assert not (workspace / ".foldline").exists()  # /ping stays lazy
        status, headers, raw = server.request(
            "POST", "/invocations", {"prompt": "wait", "async": True, "id": "long"}
        )
        assert status == 200 and json.loads(raw)["status"] == "accepted", raw
        runs_in = headers["x-foldline-worker"]
        answers: Counter[str] = Counter()
        workers: Counter[str] = Counter()
        last_update = started_at
        deadline = time.monotonic() + 60
        # 200 pings, and more (bounded) until the worker without the run answered some: the
        # kernel, not the test, decides which worker takes a connection.
        while sum(answers.values()) < 200 or len(workers) < 2:
            assert time.monotonic() < deadline, f"only worker {runs_in} answered: {workers}"
            answer, updated, worker = _ping(server)
            answers[answer] += 1
            workers[worker] += 1
            assert updated >= last_update  # never goes backwards
            last_update = updated
        print(
            f"{sum(answers.values())} pings during the job: {dict(answers)}, by worker:"
            f" {dict(workers)} (the run is in {runs_in})"
        )
        assert set(answers) == {"HealthyBusy"}  # none Healthy, whichever worker answered
        (workspace / "go").touch()
        body = poll_invocation(server, "long", "ok")
        finished = time.monotonic()
        deadline = finished + 2
        while _ping(server)[0] != "Healthy":  # every worker, within 2 s of the end
            assert time.monotonic() < deadline, "still HealthyBusy 2 s after the job ended"
            time.sleep(0.05)
        after = [_ping(server) for _ in range(20)]
        assert {answer for answer, _, _ in after} == {"Healthy"}
        assert min(updated for _, updated, _ in after) >= last_update
        assert body["state"] == "ok"


def test_a_worker_killed_with_work_in_flight_does_not_leave_the_server_busy(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_RUNNER": GATED}, workers=2) as server:
        status, headers, raw = server.request(
            "POST", "/invocations", {"prompt": "wait", "async": True, "id": "cut"}
        )
        assert status == 200, raw
        assert _ping(server)[0] == "HealthyBusy"
        os.kill(int(headers["x-foldline-worker"]), signal.SIGKILL)  # the run's worker
        deadline = time.monotonic() + 30
        while _ping(server)[0] != "Healthy":  # bounded: its slot is cleared at the next ping
            assert time.monotonic() < deadline, "a dead worker's run kept the server busy"
            time.sleep(0.05)


def test_the_board_counts_work_across_forked_processes() -> None:
    board = BusyBoard()
    assert board.state()[0] is False
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a worker: counts one run in, says so, and waits for its SIGKILL
        board.enter()
        os.write(write, b"in")
        signal.pause()
        os._exit(0)
    try:
        assert os.read(read, 2) == b"in"
        busy, changed = board.state()
        assert busy is True  # the parent sees the child's run
        board.enter()
        board.leave()
        assert board.state() == (True, changed)  # the server stayed busy: no change
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    busy, cleared = board.state()
    assert busy is False and cleared >= changed  # the dead worker's run no longer counts
