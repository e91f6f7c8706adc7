"""Live progress on A2A streams, seen by the official a2a-sdk client with its defaults against a
real gunicorn: output chunks of a slow task arrive while it works, and a client that reconnects
gets the artifact back from the task's state."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from a2a.client import create_client
from a2a.types import (
    GetTaskRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)

from tests.support.a2a import user_message
from tests.support.server import serve

pytestmark = pytest.mark.server

# Prints a chunk, then holds until the test creates the file named by the prompt (bounded: at
# most 20 s), so "while it works" is a fact the test controls, not a timing guess.
RUNNER = (
    'read -r p; printf "one "; i=0; '
    'while [ ! -e "$p" ] && [ "$i" -lt 400 ]; do sleep 0.05; i=$((i+1)); done; '
    'printf "two "; echo three'
)


def _kind(response: StreamResponse) -> str:
    return str(response.WhichOneof("payload"))


async def _live(url: str, workspace: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {"events": []}
    client = await create_client(url)  # the defaults: streaming, 1.0
    async for response in client.send_message(user_message("m-live", "go-live")):
        seen["events"].append(response)
        if response.HasField("artifact_update") and "working" not in seen:
            task = await client.get_task(GetTaskRequest(id=response.artifact_update.task_id))
            seen["working"] = task.status.state  # asked while the run holds
            (workspace / "go-live").touch()
    # A second task: leave its stream after the first chunk, then subscribe again.
    stream = client.send_message(user_message("m-resume", "go-resume"))
    async for response in stream:
        if response.HasField("artifact_update"):
            seen["left_at"] = response.artifact_update.artifact.parts[0].text
            task_id = response.artifact_update.task_id
            break
    await stream.aclose()  # type: ignore[attr-defined]
    seen["resumed"] = []
    async for response in client.subscribe(SubscribeToTaskRequest(id=task_id)):
        seen["resumed"].append(response)
        if response.HasField("artifact_update") and "replay" not in seen:
            seen["replay"] = response.artifact_update  # what was printed before: let it finish
            (workspace / "go-resume").touch()
    await client.close()
    return seen


def test_a2a_stream_sends_live_chunks_and_resumes_from_the_task_state(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"FOLDLINE_RUNNER": RUNNER}
    with serve(workspace, env, workers=2) as server:
        seen = asyncio.run(_live(f"http://127.0.0.1:{server.port}", workspace))

    events = seen["events"]
    assert _kind(events[0]) == "task"
    assert seen["working"] == TaskState.TASK_STATE_WORKING  # the first chunk came mid-run
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert chunks[0].artifact.parts[0].text == "one "
    assert (chunks[0].append, chunks[0].last_chunk) == (False, False)
    assert all(c.append and not c.last_chunk for c in chunks[1:-1])
    assert "".join(c.artifact.parts[0].text for c in chunks[:-1]) == "one two three\n"
    last = chunks[-1]
    assert (last.append, last.last_chunk) == (False, True)
    assert last.artifact.parts[0].text == "one two three\n"
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    assert TaskState.TASK_STATE_WORKING in states[:-1]  # an interim status update

    assert seen["left_at"] == "one "
    resumed = seen["resumed"]
    assert _kind(resumed[0]) == "task"
    assert resumed[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert resumed[1].status_update.status.state == TaskState.TASK_STATE_WORKING
    replay = seen["replay"]
    assert replay == resumed[2].artifact_update
    assert (replay.artifact.parts[0].text, replay.append) == ("one ", False)
    tail = resumed[-1].status_update.status
    assert tail.state == TaskState.TASK_STATE_COMPLETED
    final = [r.artifact_update for r in resumed if r.HasField("artifact_update")][-1]
    assert final.last_chunk and final.artifact.parts[0].text == "one two three\n"
