"""The official a2a-sdk client against a real gunicorn, unchanged (design.md §5.2)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from tests.support.a2a import GATE_WAIT, gated, user_message
from tests.support.server import serve

pytestmark = pytest.mark.server

RUNNER = (
    f"read -r p; {GATE_WAIT}"
    'case "$p" in '
    'slow*) sleep 6; echo "done slowly";; '
    "sleepy*) sleep 30;; "
    '*) echo "echo: $p";; esac'
)


async def _scenario(url: str, workspace: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    blocking = await create_client(url, client_config=ClientConfig(streaming=False))
    # The client's read timeout is 5 s; this task takes 6 s: keep-alive spaces carry it.
    async for response in blocking.send_message(user_message("m-slow", "slow please")):
        seen["slow"] = response.task
    streaming = await create_client(url)  # the default: SendStreamingMessage
    said = user_message("m-stream", "gate hello")
    seen["stream"] = await gated(streaming.send_message(said), workspace / "gate")
    seen["get"] = await blocking.get_task(GetTaskRequest(id=seen["slow"].id))
    polling = await create_client(url, client_config=ClientConfig(streaming=False, polling=True))
    async for response in polling.send_message(user_message("m-sleepy", "sleepy job")):
        seen["sleepy"] = response.task
    seen["canceled"] = await blocking.cancel_task(CancelTaskRequest(id=seen["sleepy"].id))
    pages, token = [], ""
    for _ in range(10):
        page = await blocking.list_tasks(ListTasksRequest(page_size=1, page_token=token))
        pages.append(page)
        token = page.next_page_token
        if not token:
            break
    seen["pages"] = pages
    try:
        await blocking.get_task(GetTaskRequest(id="no-such-task"))
    except TaskNotFoundError as error:
        seen["not_found"] = error
    for client in (blocking, streaming, polling):
        await client.close()
    return seen


def test_a2a_official_client_runs_every_method_against_the_server(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}, workers=2) as server:
        seen = asyncio.run(_scenario(f"http://127.0.0.1:{server.port}", workspace))
    slow = seen["slow"]
    assert slow.status.state == TaskState.TASK_STATE_COMPLETED
    assert slow.artifacts[0].parts[0].text == "done slowly\n"
    assert slow.history[0].parts[0].text == "slow please"

    stream = seen["stream"]
    assert stream[0].HasField("task")  # the Task comes first
    assert stream[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert any(r.HasField("artifact_update") for r in stream)
    assert stream[-1].status_update.status.message.parts[0].text == "echo: gate hello\n"

    assert seen["get"].id == slow.id and seen["get"].status.state == slow.status.state
    assert seen["sleepy"].status.state in (
        TaskState.TASK_STATE_SUBMITTED,
        TaskState.TASK_STATE_WORKING,
    )
    assert seen["canceled"].status.state == TaskState.TASK_STATE_CANCELED

    pages = seen["pages"]
    assert [p.total_size for p in pages] == [3] * 3
    assert len({p.tasks[0].id for p in pages}) == 3 and pages[-1].next_page_token == ""
    assert "not found" in str(seen["not_found"])
