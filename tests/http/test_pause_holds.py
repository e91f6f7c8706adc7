"""Work under its root's control, through a real ``foldline serve`` with runner scripts and real
signals (issue 43, goals 2, 3 and 5; ADR 0058): a live pause keeps its unit and continues at
once, a cold pause finalizes, frees the unit and ``/ping``, and continue relaunches it with its
earlier output; a run killed by SIGKILL is suspended and continues to ``ok``; a graceful stop
finalizes a channel run within its grace."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import python_agent
from tests.support.front import wait_until
from tests.support.server import Server, serve

pytestmark = [pytest.mark.server, pytest.mark.slow]

# Prints a step every 0.2 s; a resumed run says how many steps its earlier runs printed.
LOOPER = """
import os, sys, time
if os.environ.get("FOLDLINE_RESUMED") == "1":
    with open(os.environ["FOLDLINE_EARLIER_OUTPUT"]) as earlier:
        steps = [line for line in earlier if line.startswith("step")]
    print(f"resumed after {len(steps)} steps", flush=True)
    sys.exit(0)
for n in range(1500):
    print(f"step {n}", flush=True)
    time.sleep(0.2)
"""
# Takes controls on stdin (ADR 0038): works until a finalize, then answers from what it has.
CHANNEL = """
import json, os, sys, threading, time
first = json.loads(sys.stdin.readline())
if first.get("resumed"):
    with open(os.environ["FOLDLINE_EARLIER_OUTPUT"]) as earlier:
        said = earlier.read()
    print(f"resumed; earlier said: {said.strip().splitlines()[-1]}", flush=True)
    sys.exit(0)
steps, done = [0], threading.Event()
def listen():
    for line in sys.stdin:
        if json.loads(line).get("type") == "finalize":
            done.set()
            return
threading.Thread(target=listen, daemon=True).start()
print("working", flush=True)
while not done.wait(0.2):
    steps[0] += 1
print(f"final answer from {steps[0]} steps", flush=True)
"""


def _agents(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "looper.py").write_text(LOOPER)
    (workspace / "channel.py").write_text(CHANNEL)
    agents = tmp_path / "agents.toml"
    agents.write_text(
        "\n".join(
            [
                "[agents.looper]",
                f"command = {json.dumps(python_agent('looper.py'))}",
                'resource_group = "cpu"',
                "[agents.channel]",
                f"command = {json.dumps(python_agent('channel.py'))}",
                'input = "lines"',
                'resource_group = "cpu"',
            ]
        )
        + "\n"
    )
    env = {
        "FOLDLINE_RUNNER": "cat",
        "FOLDLINE_AGENTS_FILE": str(agents),
        "FOLDLINE_RESOURCE_GROUPS": "cpu=1",
    }
    return workspace, env


def _json(server: Server, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    status, _, raw = server.request(
        method, path, body, {"Content-Type": "application/json"}, timeout=90
    )
    return status, json.loads(raw)


def _until(server: Server, job_id: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The job once ``done(row)``: each round blocks on the log (/v1/jobs/wait), 60 rounds."""
    row: dict[str, Any] = {}
    for _ in range(60):
        _, row = _json(server, "GET", f"/v1/jobs/{job_id}")
        if done(row):
            return row
        _json(server, "GET", f"/v1/jobs/wait?ids={job_id}&timeout=1")
    raise AssertionError(f"job {job_id} never got there: {row}")


def _until_healthy(server: Server) -> None:
    """Until /ping is Healthy (10 s at most): a run's thread leaves the busy board just after
    it records the run's end (a lost or retired run), not in the same instant."""

    def healthy() -> bool:
        return bool(_json(server, "GET", "/ping")[1]["status"] == "Healthy")

    wait_until(healthy, limit=10, what="/ping Healthy once the run's end is recorded")


def _events(server: Server, job_id: str) -> list[dict[str, Any]]:
    _, page = _json(server, "GET", f"/v1/streams/job:{job_id}/events")
    return page["events"]  # type: ignore[no-any-return]


def _said(server: Server, job_id: str, text: str) -> Callable[[dict[str, Any]], bool]:
    def check(row: dict[str, Any]) -> bool:
        return any(text in e["event"].get("text", "") for e in _events(server, job_id))

    return check


def _spawn(server: Server, agent: str) -> tuple[int, Any]:
    body = {"session": "s1", "jobs": [{"agent": agent, "prompt": "go"}]}
    return _json(server, "POST", "/v1/jobs", body)


def _started(server: Server, agent: str, text: str) -> str:
    status, body = _spawn(server, agent)
    assert status == 201, body
    job_id: str = body["jobs"][0]["job_id"]
    _until(server, job_id, _said(server, job_id, text))
    return job_id


def _process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (``T``: stopped), "" once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


def _wait_process(pid: int, want: Callable[[str], bool]) -> str:
    deadline = time.monotonic() + 10
    while not want(state := _process_state(pid)):
        assert time.monotonic() < deadline, f"pid {pid} stayed {state!r}"
        time.sleep(0.02)
    return state


def test_a_live_pause_keeps_its_unit_and_continue_resumes_it_at_once(tmp_path: Path) -> None:
    workspace, env = _agents(tmp_path)
    with serve(workspace, env) as server:
        _json(server, "POST", "/invocations", {"prompt": "hi", "session": "s1"})
        first = _started(server, "looper", "step 1")
        status, row = _json(server, "POST", f"/v1/jobs/{first}/pause")
        assert status == 200 and (row["state"], row["pause"]) == ("paused", "live"), row
        pid = row["pid"]
        _wait_process(pid, lambda s: s == "T")  # its group is stopped, not gone
        status, refused = _spawn(server, "looper")  # the paused job still holds the one unit
        assert status == 429 and "1/1 units held" in refused["error"]["message"], refused
        print("EVIDENCE live pause: process", _process_state(pid), "; a second job:", status)
        print("  ", refused["error"]["message"])
        status, row = _json(server, "POST", f"/v1/jobs/{first}/continue")
        assert status == 200 and (row["state"], row["pause"]) == ("running", None), row
        assert _wait_process(pid, lambda s: s not in ("T", "")) in "RS"  # going on, same run
        assert row["runs"] == 1
        print("EVIDENCE live continue:", status, row["state"], "runs", row["runs"])
        assert _json(server, "POST", f"/v1/jobs/{first}/cancel")[0] == 200


def test_a_cold_pause_finalizes_frees_the_unit_and_continue_relaunches_it(
    tmp_path: Path,
) -> None:
    workspace, env = _agents(tmp_path)
    with serve(workspace, env) as server:
        _json(server, "POST", "/invocations", {"prompt": "hi", "session": "s1"})
        first = _started(server, "channel", "working")
        assert _json(server, "GET", "/ping")[1]["status"] == "HealthyBusy"
        status, row = _json(
            server, "POST", f"/v1/jobs/{first}/pause", {"mode": "cold", "grace": 20}
        )
        assert status == 200 and (row["state"], row["pause"]) == ("paused", "cold"), row
        row = _until(server, first, lambda r: r["pause"] == "retired")
        # It finalized within the grace (exit 0), and its output is kept.
        assert row["state"] == "paused" and row["exit_code"] == 0, row
        texts = [e["event"].get("text", "") for e in _events(server, first)]
        assert any(t.startswith("final answer from") for t in texts), texts
        kinds = [e["event_type"] for e in _events(server, first)]
        assert kinds.index("job.control") < kinds.index("job.paused") < kinds.index("job.retired")
        _until_healthy(server)
        # The unit is free: another job takes it, and the paused one's continue is refused,
        # recorded, and answered 429.
        status, body = _spawn(server, "looper")
        assert status == 201, body
        print("EVIDENCE cold pause:", row["pause"], "exit", row["exit_code"], "; /ping Healthy")
        print("   a second job on the freed unit:", status)
        second = body["jobs"][0]["job_id"]
        status, refused = _json(server, "POST", f"/v1/jobs/{first}/continue")
        assert status == 429 and "1/1 units held" in refused["error"]["message"], refused
        print("   its continue meanwhile:", status, refused["error"]["message"])
        kinds = [e["event_type"] for e in _events(server, first)]
        assert kinds[-1] == "job.continue_refused", kinds
        assert _json(server, "POST", f"/v1/jobs/{second}/cancel")[0] == 200
        _until(server, second, lambda r: r["state"] == "cancelled")
        status, row = _json(server, "POST", f"/v1/jobs/{first}/continue")
        assert status == 200 and row["state"] == "running", row
        row = _until(server, first, lambda r: r["state"] == "ok")
        last = row["result"].strip().splitlines()[-1]
        assert last.startswith("resumed; earlier said: final answer from"), row["result"]
        assert row["runs"] == 2
        print("EVIDENCE cold continue:", row["state"], "runs", row["runs"], "last line:", last)


def test_a_worker_killed_by_sigkill_is_suspended_and_continues_to_ok(tmp_path: Path) -> None:
    workspace, env = _agents(tmp_path)
    with serve(workspace, env) as server:
        _json(server, "POST", "/invocations", {"prompt": "hi", "session": "s1"})
        job_id = _started(server, "looper", "step 2")
        _, row = _json(server, "GET", f"/v1/jobs/{job_id}")
        os.killpg(row["pid"], signal.SIGKILL)  # a stray kill -9, or the OOM killer
        row = _until(server, job_id, lambda r: r["state"] == "suspended")
        assert row["reason"] == "run lost: killed by SIGKILL" and row["exit_code"] == -9, row
        assert row["finished_at"] is None
        _until_healthy(server)
        status, row = _json(server, "POST", f"/v1/jobs/{job_id}/continue")
        assert status == 200 and row["state"] == "running", row
        row = _until(server, job_id, lambda r: r["state"] == "ok")
        lines = row["result"].splitlines()
        steps = [line for line in lines if line.startswith("step")]
        assert len(steps) >= 3 and lines[-1] == f"resumed after {len(steps)} steps", lines
        print("EVIDENCE SIGKILL: suspended,", "run lost: killed by SIGKILL; continued:")
        print("  ", row["state"], "runs", row["runs"], "last line:", lines[-1])


def test_a_graceful_stop_finalizes_a_channel_run_within_its_grace(tmp_path: Path) -> None:
    workspace, env = _agents(tmp_path)
    env["FOLDLINE_RESOURCE_GROUPS"] = "cpu=2"
    with serve(workspace, env) as server:
        _json(server, "POST", "/invocations", {"prompt": "hi", "session": "s1"})
        talker = _started(server, "channel", "working")
        looper = _started(server, "looper", "step 1")
        began = time.monotonic()
        status, session = _json(server, "POST", "/v1/sessions/s1/stop", {"grace": 60})
        took = time.monotonic() - began
        assert status == 200 and session["state"] == "stopped", session
        assert took < 30, f"the stop waited {took:.1f} s for runs that had ended"
        _, row = _json(server, "GET", f"/v1/jobs/{talker}")
        assert row["state"] == "ok" and "final answer from" in row["result"], row
        controls = [e["event"] for e in _events(server, talker) if e["event_type"] == "job.control"]
        assert [(c["action"], c["by"]) for c in controls] == [("finalize", "stop")], controls
        # The run that takes no input got a SIGTERM, recorded before it was sent.
        signalled = [e["event"] for e in _events(server, looper) if "signal" in e["event"]]
        assert signalled[0]["signal"] == "SIGTERM", signalled
        row = _until(server, looper, lambda r: r["finished_at"] is not None)
        assert row["state"] == "cancelled", row
        assert _json(server, "POST", "/v1/sessions/s1/stop", {"grace": 3601})[0] == 400
