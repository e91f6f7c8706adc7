"""A2A JSON-RPC through falcon's test client: every error code and the wire shapes."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from adapters.settings.config import LEASE_BUSY_TEXT
from tests.http.conftest import MakeClient, sql

ECHO = 'read -r p; echo "echo: $p"'


def rpc(
    client: Any, method: Any, params: Any = None, raw: bytes | None = None, **headers: str
) -> dict[str, Any]:
    body = (
        raw
        if raw is not None
        else json.dumps(
            {
                "jsonrpc": "2.0",
                "id": "r1",
                "method": method,
                **({} if params is None else {"params": params}),
            }
        )
    )
    answer = client.simulate_post("/", body=body, headers=headers or None)
    assert answer.status_code == 200  # JSON-RPC errors never change the HTTP status
    return json.loads(answer.text)


def send(client: Any, text: str, message_id: str, **extra: Any) -> dict[str, Any]:
    message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}], **extra}
    return rpc(client, "SendMessage", {"message": message, "configuration": {}})


def code(answer: dict[str, Any]) -> int:
    return int(answer["error"]["code"])


def test_a2a_card_is_served_without_the_lease(make_client: MakeClient) -> None:
    client, runtime = make_client()
    card = client.simulate_get("/.well-known/agent-card.json").json
    interface = card["supportedInterfaces"][0]
    assert (interface["protocolBinding"], interface["protocolVersion"]) == ("JSONRPC", "1.0")
    assert interface["url"].startswith("http") and card["capabilities"]["streaming"] is True
    assert card["skills"] and card["defaultInputModes"] and card["version"]
    assert runtime.lease_holder() is None


def test_a2a_send_message_answers_a_wrapped_completed_task(make_client: MakeClient) -> None:
    client, _ = make_client(ECHO)
    answer = send(client, "hello", "m1")
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "echo: hello\n"}]
    assert task["history"][0]["role"] == "ROLE_USER"
    assert task["status"]["message"]["role"] == "ROLE_AGENT"
    again = send(client, "hello", "m1")  # messageId deduplicates: same task, no new run
    assert again["result"]["task"]["id"] == task["id"]
    # A replay that says something else is refused, never silently answered as the first.
    assert send(client, "ignored", "m1")["error"]["code"] == -32602
    got = rpc(client, "GetTask", {"id": task["id"], "historyLength": 0})["result"]
    assert got["id"] == task["id"] and "history" not in got  # GetTask answers a bare Task


def test_a2a_follow_up_on_the_context_after_completion_starts_a_new_task(
    make_client: MakeClient,
) -> None:
    client, _ = make_client(ECHO)
    first = send(client, "one", "f1")["result"]["task"]
    second = send(client, "two", "f2", contextId=first["contextId"])["result"]["task"]
    assert second["contextId"] == first["contextId"] and second["id"] != first["id"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"{not json", -32700),
        (b"[]", -32600),
        (b'"just a string"', -32600),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod"}', -32601),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": [1]}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}', -32001),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig"}', -32602),
    ],
)
def test_a2a_request_errors_have_their_codes(
    make_client: MakeClient, raw: bytes, expected: int
) -> None:
    client, _ = make_client()
    assert code(rpc(client, None, raw=raw)) == expected


def test_a2a_parse_error_has_a_null_id(make_client: MakeClient) -> None:
    client, _ = make_client()
    assert rpc(client, None, raw=b"{oops")["id"] is None


def test_a2a_oversized_request_is_invalid(make_client: MakeClient) -> None:
    client, _ = make_client()
    big = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x" * (16 << 20)}}
    ).encode()
    assert code(rpc(client, None, raw=big)) == -32600


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}]}},
        {"message": {"messageId": "m", "parts": []}},
        {"message": {"messageId": "m", "parts": [{"raw": "not base64!"}]}},
        {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}},
        {"message": {"messageId": "m", "parts": [{"text": "x"}], "contextId": "nope"}},
    ],
)
def test_a2a_send_message_invalid_params(make_client: MakeClient, params: Any) -> None:
    client, runtime = make_client()
    assert code(rpc(client, "SendMessage", params)) == -32602
    assert sql(runtime, "SELECT count(*) FROM tasks")[0][0] == 0


@pytest.mark.parametrize("part", [{"file": {}}, {"url": None}, {"kind": "image"}])
def test_a2a_send_message_unsupported_part_kind_is_content_type_error(
    make_client: MakeClient, part: dict[str, Any]
) -> None:
    client, runtime = make_client()
    params = {"message": {"messageId": "m", "parts": [part]}}
    assert code(rpc(client, "SendMessage", params)) == -32005
    assert sql(runtime, "SELECT count(*) FROM tasks")[0][0] == 0


def test_a2a_send_message_refused_url_part_is_invalid_params(make_client: MakeClient) -> None:
    client, runtime = make_client()
    params = {"message": {"messageId": "m", "parts": [{"url": "http://127.0.0.1:9/a.png"}]}}
    answer = rpc(client, "SendMessage", params)
    assert code(answer) == -32602 and "loopback" in answer["error"]["message"]
    assert sql(runtime, "SELECT count(*) FROM tasks")[0][0] == 0


def test_a2a_send_message_raw_part_is_a_file_even_when_not_text(make_client: MakeClient) -> None:
    client, runtime = make_client(ECHO)
    raw = {"raw": base64.b64encode(b"\xff\xfe").decode()}
    params = {"message": {"messageId": "m", "parts": [raw]}, "configuration": {}}
    task = rpc(client, "SendMessage", params)["result"]["task"]
    saved = f"echo: FILE: {runtime.config.workspace}/a2a-files/"
    assert task["artifacts"][0]["parts"][0]["text"].startswith(saved)


def test_a2a_version_header_other_than_1_is_refused(make_client: MakeClient) -> None:
    client, _ = make_client()
    answer = rpc(client, "GetTask", {"id": "x"}, **{"A2A-Version": "2.0"})
    assert code(answer) == -32009


def test_a2a_lease_busy_is_an_internal_error_with_the_stable_text(
    make_client: MakeClient,
) -> None:
    first, _ = make_client(ECHO, holder="one")
    send(first, "mine", "a")
    second, _ = make_client(ECHO, holder="two")
    answer = send(second, "yours", "b")
    info = {"reason": "INTERNAL_ERROR", "domain": "a2a-protocol.org"}
    detail = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", **info}
    assert answer["error"] == {
        "code": -32603,
        "message": LEASE_BUSY_TEXT,
        "data": [{**detail, "metadata": {"code": "lease_busy"}}],
    }


def test_a2a_cancel_and_its_errors(make_client: MakeClient) -> None:
    client, _ = make_client("cat >/dev/null; sleep 30")
    sleepy = rpc(
        client,
        "SendMessage",
        {
            "message": {"messageId": "s", "parts": [{"text": "zz"}]},
            "configuration": {"returnImmediately": True},
        },
    )["result"]["task"]
    canceled = rpc(client, "CancelTask", {"id": sleepy["id"]})["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert rpc(client, "CancelTask", {"id": sleepy["id"]})["result"]["id"] == sleepy["id"]
    assert code(rpc(client, "CancelTask", {"id": "missing"})) == -32001
    assert code(rpc(client, "SubscribeToTask", {"id": sleepy["id"]})) == -32004
    follow = send(client, "more", "s2", taskId=sleepy["id"], contextId=sleepy["contextId"])
    assert code(follow) == -32004


def test_a2a_cancel_of_a_completed_task_is_not_cancelable(make_client: MakeClient) -> None:
    client, _ = make_client(ECHO)
    done = send(client, "x", "c1")["result"]["task"]
    assert code(rpc(client, "CancelTask", {"id": done["id"]})) == -32002


def test_a2a_list_tasks_pages_by_keyset_and_filters(make_client: MakeClient) -> None:
    client, _ = make_client(ECHO)
    ids = {send(client, f"t{i}", f"l{i}")["result"]["task"]["id"] for i in range(5)}
    seen, token = [], ""
    for _ in range(10):
        page = rpc(client, "ListTasks", {"pageSize": 2, "pageToken": token})["result"]
        assert page["totalSize"] == 5 and page["pageSize"] == 2
        seen += [t["id"] for t in page["tasks"]]
        token = page["nextPageToken"]
        if not token:
            break
    assert len(seen) == 5 and set(seen) == ids
    default = rpc(client, "ListTasks", {})["result"]
    assert default["pageSize"] == 50 and len(default["tasks"]) == 5
    done = rpc(client, "ListTasks", {"status": "TASK_STATE_COMPLETED"})["result"]
    assert done["totalSize"] == 5
    for bad in (
        {"pageSize": 0},
        {"pageSize": 101},
        {"pageSize": "9"},
        {"pageToken": "garbage!"},
        {"status": "completed"},
    ):
        assert code(rpc(client, "ListTasks", bad)) == -32602


def test_a2a_streaming_sends_the_task_first_and_closes_after_terminal(
    make_client: MakeClient,
) -> None:
    client, _ = make_client(ECHO)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": "s1",
            "method": "SendStreamingMessage",
            "params": {"message": {"messageId": "st", "parts": [{"text": "go"}]}},
        }
    )
    started = time.monotonic()
    answer = client.simulate_post("/", body=body, headers={"Accept": "text/event-stream"})
    assert answer.headers["content-type"] == "text/event-stream"
    frames = [
        json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: ")
    ]
    assert all(f["jsonrpc"] == "2.0" and f["id"] == "s1" for f in frames)
    assert "task" in frames[0]["result"]
    last = frames[-1]["result"]["statusUpdate"]["status"]["state"]
    assert last == "TASK_STATE_COMPLETED" and time.monotonic() - started < 15
