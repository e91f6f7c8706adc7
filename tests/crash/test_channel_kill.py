"""``kill -9`` of the server between a control's event and its delivery (issue 29): after
recovery the control reaches the resumed run exactly once, and none delivered before the kill
is written again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.crash.test_server_recovery import kill_everything
from tests.support.agents import python_agent
from tests.support.channel import job_events, of_type, wait_for
from tests.support.server import RECOVERY_ENV, Server, poll_invocation, serve

pytestmark = [pytest.mark.crash, pytest.mark.server]

# The first run reads its prompt and nothing more, so its controls fill the pipe (64 KiB) and
# the rest stay recorded, undelivered; the resumed run reads every control up to an effort.
AGENT = r"""
import json, os, sys, time

def line():
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(0, 1)  # byte by byte: nothing beyond the line is taken from the pipe
        if not chunk:
            break
        data += chunk
    return data

prompt = json.loads(line())
if not prompt["resumed"]:
    print("first run: reads nothing more", flush=True)
    time.sleep(120)
    sys.exit(1)
got = []
while raw := line():
    control = json.loads(raw)
    got.append([control["id"], control["type"]])
    if control["type"] == "effort":
        break
print("resumed run got", json.dumps(got), flush=True)
"""
BIG = 20_000  # characters of each finalize: three lines fit in the pipe, a fourth does not


def _control(server: Server, job_id: str, action: str, body: dict[str, Any]) -> int:
    status, _, raw = server.request("GET", f"/v1/jobs/{job_id}")
    revision = str(json.loads(raw)["control_revision"])  # a channel control names it (ADR 0057)
    headers = {"Content-Type": "application/json", "If-Match": revision}
    status, _, raw = server.request("POST", f"/v1/jobs/{job_id}/{action}", body, headers)
    assert status == 202, raw
    return int(json.loads(raw)["control"])


def test_a_control_recorded_before_a_kill_reaches_the_resumed_run_exactly_once(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "agent.py").write_text(AGENT)
    env = {
        **RECOVERY_ENV,
        "FOLDLINE_RUNNER": python_agent(str(tmp_path / "agent.py")),
        "FOLDLINE_RUNNER_INPUT": "lines",
    }
    with serve(workspace, env) as first:
        _, receipt = first.invoke({"prompt": "work", "session": "s1", "async": True})
        job_id = receipt["invocation"]
        sent = [
            _control(first, job_id, "finalize", {"text": f"{n}" * BIG}) for n in range(1, 5)
        ] + [_control(first, job_id, "effort", {"effort": "high"})]
        before = wait_for(first, job_id, "job.control_delivered", 3)
        kill_everything(first)
    first_run = of_type(before, "job.started")[0]["event"]["run_id"]
    delivered = [e["event"]["control"] for e in of_type(before, "job.control_delivered")]
    assert delivered == sent[:3]  # the fourth line did not fit whole: it is not delivered

    with serve(workspace, env) as second:
        body = poll_invocation(second, job_id, "ok", limit=60)  # a get starts the recovery
        events = job_events(second, job_id)
    got = [[sent[3], "finalize"], [sent[4], "effort"]]
    # the job's whole output (ADR 0049): the first run's line, then the resumed run's
    said = f"first run: reads nothing more\nresumed run got {json.dumps(got)}\n"
    assert body["result"] == said
    runs = [e["event"]["run_id"] for e in of_type(events, "job.started")]
    assert len(runs) == 2 and runs[0] == first_run
    by_control: dict[int, str] = {}
    for event in of_type(events, "job.control_delivered"):
        control = event["event"]["control"]
        assert control not in by_control, f"control {control} delivered twice"
        by_control[control] = event["event"]["run_id"]
    assert by_control == {**dict.fromkeys(sent[:3], runs[0]), **dict.fromkeys(sent[3:], runs[1])}
    assert not of_type(events, "job.control_lost")
    # Every control was recorded before any delivery of it.
    position = {e["position"]: e for e in events}
    for event in of_type(events, "job.control_delivered"):
        assert position[event["event"]["control"]]["event_type"] == "job.control"
        assert event["event"]["control"] < event["position"]
