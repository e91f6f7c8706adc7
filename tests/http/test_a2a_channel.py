"""A2A follow-ups reach a running agent that takes input (ADR 0038), on a real gunicorn with the
example agent (``adapters.programs.channel_agent``): the answer to its question, or a message into
the same run; no supersede, no new run. A run without input keeps ADR 0024's supersede."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import TaskState

from tests.support.a2a import user_message
from tests.support.channel import CHANNEL_ENV, job_events, of_type, wait_for
from tests.support.server import Server, serve

pytestmark = pytest.mark.server


def _send(server: Server, message: dict[str, Any]) -> dict[str, Any]:
    """SendMessage that answers at once; the JSON-RPC ``result``."""
    body = {"jsonrpc": "2.0", "id": "r", "method": "SendMessage"}
    params = {"message": message, "configuration": {"returnImmediately": True}}
    status, _, raw = server.request("POST", "/", {**body, "params": params})
    assert status == 200, raw
    answer = json.loads(raw)
    assert "result" in answer, answer
    return answer["result"]  # type: ignore[no-any-return]


def _follow_up(
    server: Server, message_id: str, task: dict[str, Any], text: str, **more: Any
) -> str:
    """A follow-up on ``task``; the task id it answers."""
    message = {
        "messageId": message_id,
        "taskId": task["id"],
        "contextId": task["contextId"],
        "parts": [{"text": text}],
        **more,
    }
    return str(_send(server, message)["task"]["id"])


def _jobs_of(server: Server, task: dict[str, Any]) -> list[dict[str, Any]]:
    status, _, raw = server.request("GET", f"/v1/jobs?session={task['contextId']}")
    assert status == 200, raw
    return [j for j in json.loads(raw)["jobs"] if j["task_id"] == task["id"]]


def _task_events(server: Server, task_id: str) -> list[dict[str, Any]]:
    status, _, raw = server.request("GET", f"/v1/streams/task:{task_id}/events?limit=1000")
    assert status == 200, raw
    return list(json.loads(raw)["events"])


def _finished(server: Server, task_id: str, limit: float = 30) -> dict[str, Any]:
    """GetTask until the task leaves working (bounded)."""
    body = {"jsonrpc": "2.0", "id": "g", "method": "GetTask", "params": {"id": task_id}}
    deadline = time.monotonic() + limit
    while True:
        task: dict[str, Any] = json.loads(server.request("POST", "/", body)[2])["result"]
        if task["status"]["state"] not in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
            return task
        assert time.monotonic() < deadline, task
        time.sleep(0.05)


def _started(server: Server, first: str) -> tuple[dict[str, Any], str]:
    """A ``wait`` task whose run has begun its first turn: the task and its job."""
    task = _send(server, {"messageId": "m-1", "parts": [{"text": first}]})["task"]
    (job,) = _jobs_of(server, task)
    wait_for(server, job["job_id"], "job.turn_started")
    return task, str(job["job_id"])


async def _ask_and_answer(url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    blocking = await create_client(url, client_config=ClientConfig(streaming=False))
    async for response in blocking.send_message(user_message("m-ask", "ask: Which colour?")):
        seen["asked"] = response.task
    asked = seen["asked"]
    answer = user_message("m-blue", "blue", task_id=asked.id, context_id=asked.context_id)
    async for response in blocking.send_message(answer):
        seen["answered"] = response.task
    await blocking.close()
    return seen


def test_a2a_channel_answer_to_a_question_goes_into_the_same_run(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, CHANNEL_ENV, workers=2) as server:
        seen = asyncio.run(_ask_and_answer(f"http://127.0.0.1:{server.port}"))
        asked, answered = seen["asked"], seen["answered"]
        task = {"id": asked.id, "contextId": asked.context_id}
        (job,) = _jobs_of(server, task)  # one run for the task: nothing superseded it
        events = wait_for(server, job["job_id"], "job.control_delivered")
        states = [e["state"] for e in _task_events(server, asked.id)]

    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert asked.status.message.parts[0].text == "Which colour?"
    assert answered.id == asked.id
    assert answered.status.state == TaskState.TASK_STATE_COMPLETED
    assert "answer to q1: blue" in answered.artifacts[0].parts[0].text
    (control,) = of_type(events, "job.control")
    assert control["event"]["action"] == "respond" and control["event"]["request"] == "q1"
    assert json.loads(control["event"]["response"]) == {"text": "blue"}
    assert control["event"]["by"] == f"a2a:{asked.id}"
    assert of_type(events, "job.control_delivered")[0]["event"]["control"] == control["position"]
    assert not of_type(events, "job.superseded")
    asked_at = states.index("input-required")
    assert "working" in states[asked_at:] and states[-1] == "completed"


def test_a2a_channel_follow_up_mid_run_is_a_message_into_the_same_run(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, CHANNEL_ENV, workers=2) as server:
        task, job_id = _started(server, "wait for more")
        assert _follow_up(server, "m-2", task, "also add tests") == task["id"]
        # The agent's progress line is the last it says of a control: the job is quiet after.
        events = wait_for(server, job_id, "job.progress")
        (first,) = of_type(events, "job.control")
        # The same messageId again: answered with the task, nothing recorded.
        head = len(job_events(server, job_id)), len(_task_events(server, task["id"]))
        assert _follow_up(server, "m-2", task, "also add tests") == task["id"]
        again = len(job_events(server, job_id)), len(_task_events(server, task["id"]))
        assert _follow_up(server, "m-3", task, "done") == task["id"]
        done = _finished(server, task["id"])
        jobs = _jobs_of(server, task)
        events = job_events(server, job_id)
        task_events = _task_events(server, task["id"])

    assert again == head
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    result = done["artifacts"][0]["parts"][0]["text"]
    assert "working on: wait for more" in result
    assert f"message {first['position']} in t2: also add tests" in result
    assert "in t3: done" in result
    assert [j["job_id"] for j in jobs] == [job_id] and jobs[0]["state"] == "ok"
    assert [c["event"]["action"] for c in of_type(events, "job.control")] == ["message"] * 2
    assert [c["command_id"] for c in of_type(events, "job.control")] == ["a2a:m-2", "a2a:m-3"]
    assert len(of_type(events, "job.control_delivered")) == 2
    assert not of_type(events, "job.superseded") and len(of_type(events, "job.started")) == 1
    added = of_type(task_events, "task.message_added")
    assert [e["event"]["message_id"] for e in added] == ["m-2", "m-3"]
    assert [m["parts"][0]["text"] for m in done["history"]] == [
        "wait for more",
        "also add tests",
        "done",
    ]


def test_a2a_channel_halo_interrupt_interrupts_the_active_turn_first(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, CHANNEL_ENV, workers=2) as server:
        task, job_id = _started(server, "wait")
        metadata = {"halo/interrupt": True}
        _follow_up(server, "m-2", task, "change course", metadata=metadata)
        events = wait_for(server, job_id, "job.control_delivered", count=2)
        _follow_up(server, "m-3", task, "done")
        done = _finished(server, task["id"])

    interrupt, message = of_type(events, "job.control")
    assert interrupt["event"]["action"] == "interrupt" and interrupt["event"]["turn"] == "t1"
    assert message["event"]["action"] == "message"
    assert message["event"]["text"] == "change course"
    assert interrupt["position"] < message["position"]
    result = done["artifacts"][0]["parts"][0]["text"]
    assert f"interrupt {interrupt['position']}: t1 stopped" in result
    assert f"message {message['position']} in t2: change course" in result


# No input: the run reads all its stdin and holds while its last message starts with "hold"
# (bounded at 20 s); only a supersede ends it early.
PLAIN_RUNNER = (
    'all=$(cat); last=$(printf "%s\\n" "$all" | tail -n 1); '
    'case "$last" in hold*) i=0; '
    'while [ "$i" -lt 400 ]; do sleep 0.05; i=$((i+1)); done;; esac; '
    'printf "%s messages" "$FOLDLINE_TASK_MESSAGES"'
)


def test_a2a_channel_run_without_input_is_superseded_as_before(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_RUNNER": PLAIN_RUNNER}) as server:
        task = _send(server, {"messageId": "m-1", "parts": [{"text": "hold on"}]})["task"]
        (first,) = _jobs_of(server, task)
        wait_for(server, first["job_id"], "job.started")
        _follow_up(server, "m-2", task, "and more")
        done = _finished(server, task["id"])
        jobs = _jobs_of(server, task)
        superseded = of_type(job_events(server, first["job_id"]), "job.superseded")

    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["artifacts"][0]["parts"][0]["text"] == "2 messages"
    assert len(jobs) == 2 and len(superseded) == 1
    assert superseded[0]["event"]["superseded_by"] == jobs[1]["job_id"]
