"""The server's own graceful stop, through a real ``foldline serve`` and SIGTERM to its master
(issue 43, goal 5; ADR 0058): each worker sends its runs that take input a ``finalize`` and the
others a recorded SIGTERM; a run that finalizes within the grace ends ``ok`` with its answer,
recorded before the server exits, and the caller waiting for it gets it; what lingers (a run
killed by the SIGTERM, one that ignores everything until the grace is over) is cancelled with
the stop's reason, each step recorded, the stop staying within its bound, and the next server
has nothing to resume."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine import open_log
from engine.domain import MACHINES
from projections import default_projections
from tests.http.test_pause_holds import CHANNEL  # works until a finalize, then answers
from tests.support.agents import python_agent
from tests.support.server import Server, poll_invocation, serve

pytestmark = [pytest.mark.server, pytest.mark.slow]

# Takes no input and dies of a SIGTERM (Python's default); a resumed run says so and ends.
LOOPER = """
import os, sys, time
if os.environ.get("FOLDLINE_RESUMED") == "1":
    print("resumed after the stop", flush=True)
    sys.exit(0)
for n in range(3000):
    print(f"step {n}", flush=True)
    time.sleep(0.2)
"""
# Ignores SIGTERM and reads no input: only the end of the grace stops it.
STUBBORN = """
import os, signal, sys, time
if os.environ.get("FOLDLINE_RESUMED") == "1":
    print("resumed after the stop", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for n in range(3000):
    print(f"still here {n}", flush=True)
    time.sleep(0.2)
"""


def _env(tmp_path: Path, grace_s: int) -> tuple[Path, dict[str, str]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for name, text in (("channel.py", CHANNEL), ("looper.py", LOOPER), ("stubborn.py", STUBBORN)):
        (workspace / name).write_text(text)
    agents = tmp_path / "agents.toml"
    lines = []
    for agent in ("looper", "stubborn"):
        # exec: the SIGTERM reaches Python itself, not a shell that dies of it.
        command = "exec " + python_agent(f"{agent}.py")
        lines += [f"[agents.{agent}]", f"command = {json.dumps(command)}"]
    agents.write_text("\n".join(lines) + "\n")
    return workspace, {
        "FOLDLINE_RUNNER": python_agent("channel.py"),
        "FOLDLINE_RUNNER_INPUT": "lines",
        "FOLDLINE_AGENTS_FILE": str(agents),
        "FOLDLINE_SERVER_STOP_GRACE_S": str(grace_s),
    }


def _started(server: Server, body: dict[str, Any], text: str) -> str:
    """An asynchronous invocation's job, once its output holds ``text`` (bounded)."""
    status, receipt = server.invoke({**body, "async": True})
    assert status in (200, 202), receipt
    return _saying(server, receipt["invocation"], text)


def _invoked(server: Server, key: str) -> str:
    """The job of the invocation ``key`` once it is known (a call in flight, 30 s at most)."""
    deadline = time.monotonic() + 30
    while True:
        status, body = server.invoke({"get": key})
        if status == 200:
            return str(body["invocation"])
        assert status == 404 and time.monotonic() < deadline, (status, body)
        time.sleep(0.05)


def _saying(server: Server, job_id: str, text: str) -> str:
    """``job_id`` once its output holds ``text`` (each look blocks on the log, 60 s at most)."""
    deadline = time.monotonic() + 60
    while True:
        _, _, raw = server.request("GET", f"/v1/streams/job:{job_id}/events")
        said = [e["event"].get("text", "") for e in json.loads(raw)["events"]]
        if any(text in chunk for chunk in said):
            return job_id
        assert time.monotonic() < deadline, f"job {job_id} never said {text!r}: {said}"
        server.request("GET", f"/v1/jobs/wait?ids={job_id}&timeout=1")


def _stop(server: Server, limit: float) -> tuple[float, str]:
    """SIGTERM to the master; how long until it exited (at most ``limit``), and its stderr."""
    began = time.monotonic()
    server.process.terminate()
    server.process.wait(timeout=limit)
    assert server.process.stderr is not None
    return time.monotonic() - began, server.process.stderr.read().decode()


def _recorded(workspace: Path, job_id: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """The job's state in its row and its events, read from the log after the server exited."""
    log = open_log(workspace / ".foldline" / "foldline.db", MACHINES, default_projections())
    try:
        events = [
            (e.event_type, msgspec.to_builtins(e.event)) for e in log.read_stream(f"job:{job_id}")
        ]
        rows = log.connection().execute("SELECT state FROM jobs WHERE job_id = ?", (job_id,))
        return str(next(iter(rows))[0]), events
    finally:
        log.close()


def test_a_server_stop_finalizes_a_channel_run_and_cancels_the_sigtermed_one(
    tmp_path: Path,
) -> None:
    workspace, env = _env(tmp_path, grace_s=40)
    with serve(workspace, env) as server:
        answers: list[tuple[int, Any]] = []
        caller = threading.Thread(
            target=lambda: answers.append(server.invoke({"prompt": "go", "id": "k1"}, 120))
        )
        caller.start()
        talker = _saying(server, _invoked(server, "k1"), "working")
        looper = _started(
            server, {"prompt": "go", "agent": "looper", "session": "s2", "id": "k2"}, "step 1"
        )
        took, _ = _stop(server, limit=60)
        caller.join(timeout=30)
        # Both ended long before the grace of 40 s: the stop did not wait it out.
        assert took < 30, f"the server took {took:.1f} s to stop"
        # The caller owed the reply got the finalized answer before the server went.
        assert answers and answers[0][0] == 200, answers
        assert answers[0][1]["status"] == "ok", answers
        assert "final answer from" in answers[0][1]["result"], answers

    state, events = _recorded(workspace, talker)
    kinds = [kind for kind, _ in events]
    control = [e for kind, e in events if kind == "job.control"]
    assert [(c["action"], c["by"]) for c in control] == [("finalize", "stop")], control
    finished = [e for kind, e in events if kind == "job.finished"]
    assert state == "ok" and finished[0]["outcome"] == "ok", events
    assert "final answer from" in finished[0]["result"], finished
    assert kinds.index("job.control") < kinds.index("job.finished"), kinds

    # The run without input: its SIGTERM recorded, then, killed by it, cancelled by the stop.
    _assert_cancelled_by_the_stop(workspace, looper, grace_s=40)

    with serve(workspace, env) as second:  # nothing to resume: its caller hears the cancel
        body = poll_invocation(second, "k2", "cancelled", limit=60)
        assert body["state"] == "cancelled" and body["result"] is None, body


def test_a_server_stop_cancels_a_run_that_ignores_it_within_the_grace(tmp_path: Path) -> None:
    workspace, env = _env(tmp_path, grace_s=3)
    with serve(workspace, env) as server:
        stubborn = _started(
            server, {"prompt": "go", "agent": "stubborn", "session": "s2", "id": "k3"}, "still"
        )
        took, stderr = _stop(server, limit=60)
        # The grace (3 s) and gunicorn's margin after it (5 s) bound the stop.
        assert 3 <= took < 3 + 5 + 4, f"the server took {took:.1f} s to stop: {stderr}"
        assert "are cancelled" in stderr and stubborn in stderr, stderr

    _assert_cancelled_by_the_stop(workspace, stubborn, grace_s=3)
    with serve(workspace, env) as second:
        body = poll_invocation(second, "k3", "cancelled", limit=60)
        assert "resumed after the stop" not in json.dumps(body), body


def test_a_server_stop_set_to_cut_off_leaves_what_lingers_to_the_next_server(
    tmp_path: Path,
) -> None:
    workspace, env = _env(tmp_path, grace_s=3)
    env["FOLDLINE_SERVER_STOP_LINGERING"] = "cut_off"  # a redeploy must not drop owed work
    with serve(workspace, env) as server:
        stubborn = _started(
            server, {"prompt": "go", "agent": "stubborn", "session": "s2", "id": "k4"}, "still"
        )
        took, stderr = _stop(server, limit=60)
        assert 3 <= took < 3 + 5 + 4, f"the server took {took:.1f} s to stop: {stderr}"
        assert "cut off, for recovery" in stderr and stubborn in stderr, stderr

    state, events = _recorded(workspace, stubborn)
    assert [e["signal"] for kind, e in events if kind == "job.signalled"] == ["SIGTERM"], events
    assert state == "running", events
    assert not {"job.finished", "job.suspended", "job.cancel_requested"} & {k for k, _ in events}

    with serve(workspace, env) as second:
        body = poll_invocation(second, "k4", "ok", limit=60)
        assert body["result"].endswith("resumed after the stop\n"), body


def _assert_cancelled_by_the_stop(workspace: Path, job_id: str, grace_s: int) -> None:
    """Each step of the stop recorded in order: the SIGTERM, the cancel with the stop's reason,
    its confirmation; nothing else ends the job."""
    state, events = _recorded(workspace, job_id)
    steps = [(kind, e) for kind, e in events if kind != "job.output"]
    kinds = [kind for kind, _ in steps]
    assert state == "cancelled", events
    assert kinds[-3:] == ["job.signalled", "job.cancel_requested", "job.cancelled"], kinds
    assert steps[-3][1]["signal"] == "SIGTERM", steps
    reason = f"graceful stop of the server: the grace of {grace_s} s ended"
    assert steps[-2][1]["reason"] == reason and steps[-1][1]["confirms"], steps
    assert not {"job.finished", "job.suspended"} & set(kinds), kinds
