"""What a run answers beyond its text (ADR 0054), through the official a2a-sdk client and raw
JSON-RPC (1.0 and 0.3) on a real gunicorn, with the example agent
(``adapters.programs.answer_agent``): artifacts of any parts with the run's own chunks, a
direct Message, a refusal, a request for authorization answered by the next message; and the
same answers in an ``/invocations`` body. The log they leave verifies clean."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, TaskState
from google.protobuf.json_format import MessageToDict

from tests.support.a2a import user_message
from tests.support.channel import job_events, of_type
from tests.support.receiver import in_transition_order, receiver
from tests.support.server import Server, read_events, serve

pytestmark = pytest.mark.server

ANSWER_RUNNER = f"{sys.executable} -m adapters.programs.answer_agent"
ENV = {"FOLDLINE_RUNNER": ANSWER_RUNNER}
STORY = [("Hel", False, False), ("lo, wor", True, False), ("ld", True, True)]


async def _sdk(url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    blocking = await create_client(url, client_config=ClientConfig(streaming=False))
    streaming = await create_client(url)
    async for response in blocking.send_message(user_message("m-art", "artifacts")):
        seen["artifacts"] = response.task
    async for response in blocking.send_message(user_message("m-msg", "message sdk")):
        seen["message"] = response
    async for response in blocking.send_message(user_message("m-rej", "reject not today")):
        seen["rejected"] = response.task
    async for response in blocking.send_message(user_message("m-auth", "auth")):
        seen["auth"] = response.task
    task_id, context = seen["auth"].id, seen["auth"].context_id
    again = user_message("m-token", "tok-1", task_id=task_id, context_id=context)
    async for response in blocking.send_message(again):
        seen["authorized"] = response.task
    seen["stream"] = [r async for r in streaming.send_message(user_message("m-s", "artifacts"))]
    seen["streamed_message"] = [
        r async for r in streaming.send_message(user_message("m-sm", "message stream"))
    ]
    seen["got"] = await blocking.get_task(GetTaskRequest(id=seen["rejected"].id))
    for client in (blocking, streaming):
        await client.close()
    return seen


def _rpc(server: Server, method: str, params: Any, version: str = "1.0") -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    status, _, raw = server.request("POST", "/", body, headers={"A2A-Version": version})
    assert status == 200 and b"Traceback" not in raw, raw
    answer: dict[str, Any] = json.loads(raw)
    return answer


def _message(message_id: str, text: str, version: str = "1.0") -> dict[str, Any]:
    if version == "0.3":
        parts = [{"kind": "text", "text": text}]
        return {
            "message": {"kind": "message", "messageId": message_id, "role": "user", "parts": parts}
        }
    return {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}


def _verify(workspace: Path) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "adapters.cli",
            "verify",
            str(workspace / ".foldline" / "foldline.db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    verdict: dict[str, Any] = json.loads(done.stdout)
    return verdict


def test_a2a_answers_through_the_official_client(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, ENV, workers=2) as server:
        seen = asyncio.run(_sdk(f"http://127.0.0.1:{server.port}"))
    made = seen["artifacts"]
    for name in ("artifacts", "message", "rejected", "auth", "authorized"):  # the note quotes
        print(f"{name}: {json.dumps(MessageToDict(seen[name]))}")
    assert made.status.state == TaskState.TASK_STATE_COMPLETED
    by_id = {a.artifact_id: a for a in made.artifacts}
    assert MessageToDict(by_id["figures"].parts[0].data) == {"total": 42}
    report = by_id["report"].parts[0]
    assert (report.url, report.filename, report.media_type) == (
        "https://example.com/report.pdf",
        "report.pdf",
        "application/pdf",
    )
    table = by_id["table"].parts[0]
    assert (table.raw, table.filename, table.media_type) == (b"a,b\n1,2\n", "table.csv", "text/csv")
    assert [p.text for p in by_id["story"].parts] == ["Hel", "lo, wor", "ld"]
    assert made.artifacts[-1].parts[0].text == "made four artifacts\n"  # the result, as ever

    reply = seen["message"]
    assert reply.HasField("message") and not reply.HasField("task")  # a Message, not a Task
    assert reply.message.role == 2  # ROLE_AGENT
    assert reply.message.parts[0].text == "hello, sdk"
    assert MessageToDict(reply.message.parts[1].data) == {"greeted": True}

    rejected = seen["rejected"]
    assert rejected.status.state == TaskState.TASK_STATE_REJECTED
    assert rejected.status.message.parts[0].text == "not today"
    assert seen["got"].status.state == TaskState.TASK_STATE_REJECTED

    assert seen["auth"].status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    assert seen["auth"].status.message.parts[0].text == "sign in, then send your token"
    authorized = seen["authorized"]
    assert authorized.id == seen["auth"].id
    assert authorized.status.state == TaskState.TASK_STATE_COMPLETED
    assert authorized.artifacts[-1].parts[0].text == "authorized with tok-1\n"

    stream = seen["stream"]
    assert stream[0].HasField("task")
    story = [
        u.artifact_update
        for u in stream
        if u.HasField("artifact_update") and u.artifact_update.artifact.artifact_id == "story"
    ]
    got = [(u.artifact.parts[0].text, u.append, u.last_chunk) for u in story]
    assert got == STORY  # the run's own chunk boundaries
    assert stream[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    streamed = seen["streamed_message"]  # a stream gave the Task first: the message is its end
    assert streamed[0].HasField("task")
    last = streamed[-1].status_update.status
    assert last.state == TaskState.TASK_STATE_COMPLETED
    assert last.message.parts[0].text == "hello, stream"
    assert not any(
        u.HasField("artifact_update") and u.artifact_update.last_chunk for u in streamed
    )  # no result artifact beside a message

    verdict = _verify(workspace)
    assert verdict["ok"] is True and verdict["violations"] == []


def test_a2a_answers_over_raw_json_rpc_in_both_dialects(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, ENV) as server:
        message = _rpc(server, "SendMessage", _message("r-msg", "message raw"))
        artifacts = _rpc(server, "SendMessage", _message("r-art", "artifacts"))["result"]["task"]
        listed = _rpc(server, "ListTasks", {"includeArtifacts": True})["result"]["tasks"]
        legacy = _rpc(server, "message/send", _message("l-msg", "message old", "0.3"), "0.3")
        rejected = _rpc(server, "message/send", _message("l-rej", "reject no", "0.3"), "0.3")
        old_task = _rpc(server, "tasks/get", {"id": artifacts["id"]}, "0.3")["result"]
        conn = server.connection()
        body = {"jsonrpc": "2.0", "id": 2, "method": "SendStreamingMessage"}
        conn.request(
            "POST",
            "/",
            json.dumps({**body, "params": _message("r-s", "artifacts")}),
            {"A2A-Version": "1.0", "Accept": "text/event-stream"},
        )
        frames = [json.loads(e["data"])["result"] for e in read_events(conn.getresponse())]
        conn.close()
    result = message["result"]
    assert list(result) == ["message"]
    assert result["message"]["role"] == "ROLE_AGENT"
    assert result["message"]["parts"] == [{"text": "hello, raw"}, {"data": {"greeted": True}}]
    got = {a["artifactId"]: a["parts"] for a in artifacts["artifacts"]}
    assert got["figures"] == [{"data": {"total": 42}}]
    assert got["report"] == [
        {
            "url": "https://example.com/report.pdf",
            "filename": "report.pdf",
            "mediaType": "application/pdf",
        }
    ]
    assert [p["text"] for p in got["story"]] == ["Hel", "lo, wor", "ld"]
    (made,) = [t for t in listed if t["id"] == artifacts["id"]]
    table = {a["artifactId"]: a["parts"] for a in made["artifacts"]}["table"]
    assert table == [  # a listing sends no file bytes
        {
            "data": {
                "omitted": "listing",
                "filename": "table.csv",
                "mediaType": "text/csv",
                "size": 8,
            }
        }
    ]
    assert got["table"][0]["raw"] == "YSxiCjEsMgo="  # GetTask's, SendMessage's do
    assert legacy["result"]["kind"] == "message" and legacy["result"]["role"] == "agent"
    assert legacy["result"]["parts"][1] == {"kind": "data", "data": {"greeted": True}}
    assert rejected["result"]["status"]["state"] == "rejected"
    assert rejected["result"]["status"]["message"]["parts"][0]["text"] == "no"
    old = {a["artifactId"]: a["parts"] for a in old_task["artifacts"]}
    assert old["report"][0] == {
        "kind": "file",
        "file": {
            "uri": "https://example.com/report.pdf",
            "name": "report.pdf",
            "mimeType": "application/pdf",
        },
    }
    assert old["figures"][0] == {"kind": "data", "data": {"total": 42}}
    chunks = [
        (f["artifactUpdate"]["append"], f["artifactUpdate"]["lastChunk"])
        for f in frames
        if "artifactUpdate" in f and f["artifactUpdate"]["artifact"]["artifactId"] == "story"
    ]
    assert chunks == [(a, last) for _, a, last in STORY]


def test_invocations_body_shows_what_the_run_answered(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, ENV) as server:
        bodies = {
            prompt: server.invoke({"prompt": prompt, "session": f"s-{n}"})
            for n, prompt in enumerate(("artifacts", "message inv", "reject nope", "plain"))
        }
    status, made = bodies["artifacts"]
    assert status == 200 and made["status"] == "ok", made
    assert [a["artifactId"] for a in made["artifacts"]] == ["figures", "report", "table", "story"]
    assert made["artifacts"][0]["parts"] == [{"data": {"total": 42}}]
    assert made["result"] == "made four artifacts\n"  # the answer lines kept out of it
    _, replied = bodies["message inv"]
    assert replied["message"]["parts"][0] == {"text": "hello, inv"}
    _, refused = bodies["reject nope"]
    assert refused["rejected"] == "nope" and refused["status"] == "ok"
    _, plain = bodies["plain"]
    assert plain["result"] == "done: plain\n"
    assert not {"artifacts", "message", "rejected"} & set(plain)  # as before ADR 0054


async def _channel(url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    blocking = await create_client(url, client_config=ClientConfig(streaming=False))
    streaming = await create_client(url)
    async for response in blocking.send_message(user_message("c-auth", "auth")):
        seen["auth"] = response.task
    task_id, context = seen["auth"].id, seen["auth"].context_id
    again = user_message("c-token", "tok-2", task_id=task_id, context_id=context)
    async for response in blocking.send_message(again):
        seen["authorized"] = response.task
    seen["stream"] = [r async for r in streaming.send_message(user_message("c-s", "artifacts"))]
    async for response in blocking.send_message(user_message("c-rej", "reject busy")):
        seen["rejected"] = response.task
    for client in (blocking, streaming):
        await client.close()
    return seen


def test_a2a_answers_of_a_channel_run_go_live_and_its_auth_is_answered_in_the_run(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {**ENV, "FOLDLINE_RUNNER_INPUT": "lines"}, workers=2) as server:
        seen = asyncio.run(_channel(f"http://127.0.0.1:{server.port}"))
        (job_id,) = [
            j["job_id"]
            for j in json.loads(server.request("GET", "/v1/jobs?limit=100")[2])["jobs"]
            if j["task_id"] == seen["auth"].id
        ]
        events = job_events(server, job_id)
    assert seen["auth"].status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    authorized = seen["authorized"]
    assert authorized.status.state == TaskState.TASK_STATE_COMPLETED
    assert authorized.artifacts[-1].parts[0].text == "authorized with tok-2\n"
    asked = of_type(events, "job.input_requested")
    assert [(e["event"]["request"], e["event"]["kind"]) for e in asked] == [("a1", "auth")]
    (respond,) = of_type(events, "job.control")  # the same run took the answer
    assert respond["event"]["action"] == "respond"
    assert len(of_type(events, "job.started")) == 1
    story = [
        (
            u.artifact_update.artifact.parts[0].text,
            u.artifact_update.append,
            u.artifact_update.last_chunk,
        )
        for u in seen["stream"]
        if u.HasField("artifact_update") and u.artifact_update.artifact.artifact_id == "story"
    ]
    assert story == STORY
    assert seen["rejected"].status.state == TaskState.TASK_STATE_REJECTED
    assert seen["rejected"].status.message.parts[0].text == "busy"


def test_push_hears_a_refusal_and_a_direct_message_with_its_parts(tmp_path: Path) -> None:
    env = {**ENV, "FOLDLINE_PUSH_ALLOW": "127.0.0.1"}
    with receiver() as hook, serve(tmp_path, env) as server:
        for mid, text in (("p-rej", "reject no thanks"), ("p-msg", "message push")):
            params = {
                **_message(mid, text),
                "configuration": {"taskPushNotificationConfig": {"url": hook.url}},
            }
            assert "error" not in _rpc(server, "SendMessage", params)
        received = in_transition_order(hook.wait_for(4))
    finals = [r.body["task"] for r in received if "task" in r.body]
    by_state = {t["status"]["state"]: t for t in finals}
    rejected = by_state["TASK_STATE_REJECTED"]["status"]
    assert rejected["message"]["parts"] == [{"text": "no thanks"}]
    replied = by_state["TASK_STATE_COMPLETED"]["status"]["message"]
    assert replied["parts"] == [{"text": "hello, push"}, {"data": {"greeted": True}}]
