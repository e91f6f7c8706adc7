"""A follow-up message on a working task is folded into it (ADR 0024), seen by the official
a2a-sdk client on a real gunicorn: the task's run is superseded, a new run gets every message,
and the task completes once with the last run's result."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, TaskState

from tests.support.a2a import user_message
from tests.support.server import serve

pytestmark = pytest.mark.server

# Gets the task's messages on stdin, one per line. A last message starting with "hold" waits
# for a file the test never creates (bounded at 20 s): only a supersede ends that run early.
RUNNER = (
    'all=$(cat); last=$(printf "%s\\n" "$all" | tail -n 1); '
    'case "$last" in hold*) i=0; '
    'while [ ! -e never ] && [ "$i" -lt 400 ]; do sleep 0.05; i=$((i+1)); done;; esac; '
    'printf "%s messages: %s" "$FOLDLINE_TASK_MESSAGES" "$(printf "%s" "$all" | tr "\\n" "|")"'
)


async def _scenario(url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {"stream": []}
    streaming = await create_client(url)  # the defaults
    blocking = await create_client(url, client_config=ClientConfig(streaming=False))
    async for response in streaming.send_message(user_message("m-1", "hold on")):
        seen["stream"].append(response)
        if response.HasField("task"):
            task = response.task
            follow_up = user_message("m-2", "and more", task_id=task.id, context_id=task.context_id)
            async for answer in blocking.send_message(follow_up):
                seen["follow_up"] = answer.task
    seen["get"] = await blocking.get_task(GetTaskRequest(id=seen["follow_up"].id))
    for client in (streaming, blocking):
        await client.close()
    return seen


def test_a2a_follow_up_on_a_working_task_is_folded_into_it(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}, workers=2) as server:
        seen = asyncio.run(_scenario(f"http://127.0.0.1:{server.port}"))
        jobs = server.request("GET", "/v1/jobs")[2]

    stream, follow_up, got = seen["stream"], seen["follow_up"], seen["get"]
    first = stream[0].task
    assert follow_up.id == first.id and follow_up.context_id == first.context_id
    assert follow_up.status.state == TaskState.TASK_STATE_COMPLETED
    assert follow_up.artifacts[0].parts[0].text == "2 messages: hold on|and more"
    # The first message's stream follows the same task to the same single completion.
    states = [r.status_update.status.state for r in stream if r.HasField("status_update")]
    assert states.count(TaskState.TASK_STATE_COMPLETED) == 1
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    final = [r.artifact_update for r in stream if r.HasField("artifact_update")][-1]
    assert final.last_chunk and final.artifact.parts[0].text == "2 messages: hold on|and more"
    assert [m.parts[0].text for m in got.history] == ["hold on", "and more"]
    assert [m.message_id for m in got.history] == ["m-1", "m-2"]
    assert b'"superseded"' in jobs  # the first run gave way to the second


def _send(server: Any, message: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": "r", "method": "SendMessage"}
    params = {"message": message, "configuration": {"returnImmediately": True}}
    _, _, raw = server.request("POST", "/", {**body, "params": params})
    return json.loads(raw)  # type: ignore[no-any-return]


def test_a2a_concurrent_follow_ups_all_reach_the_last_run(tmp_path: Path) -> None:
    """Five follow-ups raced into one working task from threads on two workers: each plan is
    checked against the task's version, so the run that completes the task got every one."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}, workers=2) as server:
        first = _send(server, {"messageId": "c-0", "parts": [{"text": "hold on"}]})
        task_id = first["result"]["task"]["id"]
        context = first["result"]["task"]["contextId"]
        texts = [f"hold {n}" for n in range(1, 6)]
        with ThreadPoolExecutor(5) as pool:
            answers = list(
                pool.map(
                    lambda n: _send(
                        server,
                        {
                            "messageId": f"c-{n}",
                            "taskId": task_id,
                            "contextId": context,
                            "parts": [{"text": texts[n - 1]}],
                        },
                    ),
                    range(1, 6),
                )
            )
        # The last run holds too: one more follow-up, not a hold, lets it finish.
        _send(server, {"messageId": "c-6", "taskId": task_id, "parts": [{"text": "done"}]})
        body = {"jsonrpc": "2.0", "id": "g", "method": "GetTask", "params": {"id": task_id}}
        deadline, task = time.monotonic() + 20, {}
        while time.monotonic() < deadline:
            task = json.loads(server.request("POST", "/", body)[2])["result"]
            if task["status"]["state"] != "TASK_STATE_WORKING":
                break
            time.sleep(0.05)
    assert all(a["result"]["task"]["id"] == task_id for a in answers)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    result = task["artifacts"][0]["parts"][0]["text"]
    count, _, said = result.partition(" messages: ")
    assert count == "7" and said.split("|")[0] == "hold on" and said.split("|")[-1] == "done"
    assert sorted(said.split("|")[1:6]) == texts  # every racer, in the order they committed
    assert [m["parts"][0]["text"] for m in task["history"]] == said.split("|")
