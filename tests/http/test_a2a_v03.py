"""A2A 0.3 on the same URL: the official a2a-sdk client's 0.3 transport (chosen from a card whose
only interface says ``protocolVersion: 0.3``) and its default 1.0 one (chosen from the dual card
as served), against a real gunicorn; and the 0.3 shapes on the wire."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    SubscribeToTaskRequest,
    TaskState,
)

from tests.support.a2a import GATE_WAIT, card_with_only, user_message
from tests.support.server import Server, read_events, serve

pytestmark = pytest.mark.server

RUNNER = f'read -r p; {GATE_WAIT}case "$p" in sleepy*) sleep 30;; *) printf "echo: %s" "$p";; esac'


async def _scenario(url: str, card: dict[str, Any]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    legacy_card = parse_agent_card(card_with_only(card, "0.3"))
    streaming = await create_client(legacy_card)
    blocking = await create_client(legacy_card, client_config=ClientConfig(streaming=False))
    seen["transport"] = type(streaming._transport).__name__  # type: ignore[attr-defined]
    seen["stream"] = [r async for r in streaming.send_message(user_message("m-s", "streamed"))]
    async for response in blocking.send_message(user_message("m-b", "blocking")):
        seen["blocking"] = response.task
    seen["get"] = await blocking.get_task(GetTaskRequest(id=seen["blocking"].id))
    polling = await create_client(
        legacy_card, client_config=ClientConfig(streaming=False, polling=True)
    )
    async for response in polling.send_message(user_message("m-p", "sleepy one")):
        seen["sleepy"] = response.task
    resubscribed = streaming.subscribe(SubscribeToTaskRequest(id=seen["sleepy"].id))
    async for response in resubscribed:
        seen["resubscribed"] = response
        break
    await resubscribed.aclose()  # type: ignore[attr-defined]
    seen["canceled"] = await blocking.cancel_task(CancelTaskRequest(id=seen["sleepy"].id))
    modern = await create_client(url)  # the dual card as served: the 1.0 interface wins
    seen["modern_transport"] = type(modern._transport).__name__  # type: ignore[attr-defined]
    seen["modern"] = [r async for r in modern.send_message(user_message("m-1", "modern"))]
    for client in (streaming, blocking, polling, modern):
        await client.close()
    return seen


def test_a2a_v03_transport_and_the_default_one_both_work(tmp_path: Path) -> None:
    with serve(tmp_path, {"FOLDLINE_RUNNER": RUNNER}, workers=2) as server:
        card = json.loads(server.request("GET", "/.well-known/agent-card.json")[2])
        seen = asyncio.run(_scenario(f"http://127.0.0.1:{server.port}", card))

    assert card["protocolVersion"] == "0.3" and card["url"].endswith("/")
    assert [i["protocolVersion"] for i in card["supportedInterfaces"]] == ["1.0", "0.3"]
    assert "Compat" in seen["transport"] and "Compat" not in seen["modern_transport"]

    stream = seen["stream"]
    assert stream[0].HasField("task")
    assert stream[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    chunks = [r.artifact_update for r in stream if r.HasField("artifact_update")]
    assert chunks[-1].last_chunk and chunks[-1].artifact.parts[0].text == "echo: streamed"
    blocking = seen["blocking"]
    assert blocking.status.state == TaskState.TASK_STATE_COMPLETED
    assert blocking.artifacts[0].parts[0].text == "echo: blocking"
    assert blocking.history[0].parts[0].text == "blocking"
    assert seen["get"].id == blocking.id and seen["get"].status.state == blocking.status.state
    assert seen["sleepy"].status.state == TaskState.TASK_STATE_WORKING
    assert seen["resubscribed"].task.id == seen["sleepy"].id
    assert seen["canceled"].status.state == TaskState.TASK_STATE_CANCELED
    modern = seen["modern"]
    assert modern[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


def _rpc(server: Server, method: str, params: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    body = {"jsonrpc": "2.0", "id": "r1", "method": method, "params": params}
    status, headers, raw = server.request("POST", "/", body, {"a2a-version": "0.3"})
    assert status == 200
    return headers, raw


def test_a2a_v03_shapes_on_the_wire(tmp_path: Path) -> None:
    message = {
        "kind": "message",
        "messageId": "w-1",
        "role": "user",
        "parts": [{"kind": "text", "text": "wire"}],
    }
    with serve(tmp_path, {"FOLDLINE_RUNNER": RUNNER}) as server:
        _, raw = _rpc(server, "message/send", {"message": message})
        sent = json.loads(raw)["result"]
        _, raw = _rpc(server, "tasks/get", {"id": sent["id"]})
        got = json.loads(raw)["result"]
        _, raw = _rpc(server, "tasks/pushNotificationConfig/set", {"taskId": sent["id"]})
        push = json.loads(raw)["error"]["code"]
        url = {"kind": "file", "file": {"uri": "http://127.0.0.1:9/a.png"}}  # loopback: refused
        _, raw = _rpc(
            server, "message/send", {"message": {**message, "messageId": "w-2", "parts": [url]}}
        )
        refused = json.loads(raw)["error"]["code"]
        conn = server.connection()
        body = {"jsonrpc": "2.0", "id": "r2", "method": "message/stream"}
        gated = {**message, "messageId": "w-3", "parts": [{"kind": "text", "text": "gate"}]}
        conn.request(
            "POST",
            "/",
            json.dumps({**body, "params": {"message": gated}}),
            {"a2a-version": "0.3", "Accept": "text/event-stream"},
        )
        frames = (e for e in read_events(conn.getresponse()) if "data" in e)
        # The run answers once the stream has begun: its updates come on the stream, not
        # folded into a task already completed when the stream read it.
        events = [json.loads(next(frames)["data"])["result"]]
        (tmp_path / "gate").touch()
        events += [json.loads(e["data"])["result"] for e in frames]
        conn.close()
    assert sent["kind"] == "task" and sent["status"]["state"] == "completed"
    assert sent["status"]["message"]["role"] == "agent"
    assert sent["status"]["message"]["parts"] == [{"kind": "text", "text": "echo: wire"}]
    assert sent["history"][0]["role"] == "user" and sent["history"][0]["kind"] == "message"
    assert got["kind"] == "task" and got["id"] == sent["id"]
    assert (push, refused) == (-32602, -32602)  # a push config without its config; a url
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "task" and kinds[-1] == "status-update" and "artifact-update" in kinds
    assert events[-1]["final"] is True and events[-1]["status"]["state"] == "completed"
    assert all(e["final"] is False for e in events[1:-1] if e["kind"] == "status-update")
