"""A2A as the specification says, beyond what the SDK's own scenario drives (docs/a2a.md
"Conformance"): error details, ListTasks, idempotent deletes, a replayed message id."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest
from a2a.utils.errors import TaskNotFoundError

from tests.support.server import Server, serve

pytestmark = pytest.mark.server

# "gate ..." works until the file ``gate`` is in the workspace (at most 60 s), then answers.
RUNNER = (
    'read -r p; case "$p" in '
    "gate*) for _ in $(seq 600); do [ -e gate ] && break; sleep 0.1; done; echo opened;; "
    '*) echo "echo: $p";; esac'
)
ENV = {"FOLDLINE_RUNNER": RUNNER, "FOLDLINE_PUSH_ALLOW": "127.0.0.1"}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def _rpc(server: Server, method: str, params: Any, version: str = "1.0") -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    status, _, raw = server.request("POST", "/", body, headers={"A2A-Version": version})
    assert status == 200 and b"Traceback" not in raw, raw
    answer: dict[str, Any] = json.loads(raw)
    return answer


def _send(server: Server, message_id: str, text: str, **more: Any) -> dict[str, Any]:
    message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}], **more}
    params: dict[str, Any] = {"message": message}
    if "configuration" in more:
        params["configuration"] = message.pop("configuration")
    return _rpc(server, "SendMessage", params)


def _task(answer: dict[str, Any]) -> dict[str, Any]:
    task: dict[str, Any] = answer["result"]["task"]
    return task


def _info(answer: dict[str, Any]) -> dict[str, Any]:
    (info,) = answer["error"]["data"]  # exactly one ErrorInfo (§9.5)
    assert info["@type"] == ERROR_INFO, info
    return dict(info)


async def _sdk_get_unknown(url: str) -> TaskNotFoundError:
    client = await create_client(url, client_config=ClientConfig(streaming=False))
    try:
        await client.get_task(GetTaskRequest(id="no-such-task"))
    except TaskNotFoundError as error:
        return error
    finally:
        await client.close()
    raise AssertionError("GetTask of an unknown task answered")


def test_every_a2a_error_carries_its_error_info(tmp_path: Path) -> None:
    with serve(tmp_path, ENV) as server:
        unknown = _rpc(server, "GetTask", {"id": "no-such-task"})
        no_method = _rpc(server, "NoSuchMethod", {})
        status, _, raw = server.request("POST", "/", b"{not json", headers={})
        broken = json.loads(raw)
        bad_size = _rpc(server, "ListTasks", {"pageSize": 0})
        legacy = _rpc(server, "tasks/get", {"id": "no-such-task"}, version="0.3")
        by_sdk = asyncio.run(_sdk_get_unknown(f"http://127.0.0.1:{server.port}"))
    print("GetTask of an unknown task:", json.dumps(unknown["error"]))
    assert unknown["error"]["code"] == -32001
    assert _info(unknown) == {
        "@type": ERROR_INFO,
        "reason": "TASK_NOT_FOUND",
        "domain": "a2a-protocol.org",
        "metadata": {"taskId": "no-such-task"},
    }
    assert (no_method["error"]["code"], _info(no_method)["reason"]) == (-32601, "METHOD_NOT_FOUND")
    assert status == 200 and broken["id"] is None
    assert (broken["error"]["code"], _info(broken)["reason"]) == (-32700, "PARSE_ERROR")
    assert (bad_size["error"]["code"], _info(bad_size)["reason"]) == (-32602, "INVALID_PARAMS")
    # 0.3 defines no detail type: its ``data`` is the detail's metadata itself, no ErrorInfo.
    assert legacy["error"]["code"] == -32001, legacy
    assert legacy["error"]["data"] == {"taskId": "no-such-task"}, legacy
    # The official client reads the ErrorInfo's metadata as the error's data.
    assert by_sdk.data == {"taskId": "no-such-task"}


def test_list_tasks_by_last_update_with_artifacts_only_when_asked(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, ENV) as server:
        gated = _task(_rpc(server, "SendMessage", _returning_at_once("m-a", "gate a")))
        first = _task(_send(server, "m-b", "b"))
        second = _task(_send(server, "m-c", "c"))
        assert first["status"]["state"] == second["status"]["state"] == "TASK_STATE_COMPLETED"
        names = {gated["id"]: "a", first["id"]: "b", second["id"]: "c"}
        page_one = _rpc(server, "ListTasks", {"pageSize": 1})["result"]
        (workspace / "gate").touch()  # a task updated between two pages of one listing
        done = _wait_state(server, gated["id"], "TASK_STATE_COMPLETED")
        page_two = _rpc(
            server, "ListTasks", {"pageSize": 1, "pageToken": page_one["nextPageToken"]}
        )
        fresh = _rpc(server, "ListTasks", {})["result"]
        with_artifacts = _rpc(server, "ListTasks", {"includeArtifacts": True})["result"]
        since = done["status"]["timestamp"]
        after_b = _rpc(server, "ListTasks", {"statusTimestampAfter": first["status"]["timestamp"]})
        completed = _rpc(server, "ListTasks", {"status": "TASK_STATE_COMPLETED"})
        in_context = _rpc(server, "ListTasks", {"contextId": first["contextId"]})["result"]
        bad_time = _rpc(server, "ListTasks", {"statusTimestampAfter": "yesterday"})
        none_after = _rpc(server, "ListTasks", {"statusTimestampAfter": since})["result"]

    def order(listing: dict[str, Any]) -> list[str]:
        return [names[t["id"]] for t in listing["tasks"]]

    print("listing, last update first:", order(fresh), "pages:", order(page_one), end=" ")
    print(order(page_two["result"]))
    assert order(fresh) == ["a", "c", "b"] and fresh["totalSize"] == 3
    assert all("artifacts" not in t for t in fresh["tasks"])  # §3.1.4: only when asked
    assert all(t["artifacts"][0]["parts"] for t in with_artifacts["tasks"])
    # Keyset pages: no task twice; "a", updated after the first page, moved to the top.
    assert (order(page_one), order(page_two["result"])) == (["c"], ["b"])
    assert page_two["result"]["nextPageToken"] == ""  # the listing's end
    assert order(after_b["result"]) == ["a", "c"] and after_b["result"]["totalSize"] == 2
    assert completed["result"]["totalSize"] == 3
    assert order(in_context) == ["b"]
    assert _info(bad_time)["reason"] == "INVALID_PARAMS"
    assert none_after["tasks"] == [] and none_after["totalSize"] == 0


def test_push_config_delete_is_idempotent(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, ENV) as server:  # a config is set on a task that still works
        task_id = _task(_rpc(server, "SendMessage", _returning_at_once("m-1", "gate")))["id"]
        config = {"taskId": task_id, "id": "c1", "url": "http://127.0.0.1:9/hook"}
        assert _rpc(server, "CreateTaskPushNotificationConfig", config)["result"]["id"] == "c1"
        deletes = [
            _rpc(server, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "c1"})
            for _ in range(2)
        ]
        never_made = _rpc(
            server, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "x"}
        )
        legacy = [
            _rpc(
                server,
                "tasks/pushNotificationConfig/delete",
                {"id": task_id, "pushNotificationConfigId": "c1"},
                version="0.3",
            )
            for _ in range(2)
        ]
        unknown = _rpc(server, "DeleteTaskPushNotificationConfig", {"taskId": "nope", "id": "c1"})
        left = _rpc(server, "ListTaskPushNotificationConfigs", {"taskId": task_id})["result"]
        (workspace / "gate").touch()
    assert [d["result"] for d in deletes] == [{}, {}] and never_made["result"] == {}
    assert [d["result"] for d in legacy] == [None, None]
    assert _info(unknown)["reason"] == "TASK_NOT_FOUND"  # a task it does not know stays one
    assert left["configs"] == []


def test_a_replayed_message_id_that_differs_is_refused(tmp_path: Path) -> None:
    with serve(tmp_path, ENV) as server:
        first = _task(_send(server, "m-1", "hello"))
        again = _task(_send(server, "m-1", "hello"))
        other_text = _send(server, "m-1", "hello, again")
        other_context = _send(server, "m-1", "hello", contextId="ctx-elsewhere")
        other_push = _send(
            server,
            "m-1",
            "hello",
            configuration={"taskPushNotificationConfig": {"url": "http://127.0.0.1:9/h"}},
        )
        listing = _rpc(server, "ListTasks", {"includeArtifacts": True})["result"]
    assert again["id"] == first["id"]  # the same message again: its task, nothing new
    print("a replay with another text:", json.dumps(other_text["error"]))
    assert other_text["error"]["code"] == -32602
    assert _info(other_text)["metadata"] == {"messageId": "m-1", "differs": "parts"}
    assert _info(other_context)["metadata"]["differs"] == "contextId"
    assert _info(other_push)["metadata"]["differs"] == "configuration.taskPushNotificationConfig"
    assert listing["totalSize"] == 1  # nothing the refused replays said was recorded
    assert listing["tasks"][0]["artifacts"][0]["parts"][0]["text"] == "echo: hello\n"


def _returning_at_once(message_id: str, text: str) -> dict[str, Any]:
    message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"message": message, "configuration": {"returnImmediately": True}}


def _wait_state(server: Server, task_id: str, state: str, limit: float = 30) -> dict[str, Any]:
    """GetTask until the task is in ``state`` (bounded in time)."""
    deadline = time.monotonic() + limit
    task: dict[str, Any] = {}
    while time.monotonic() < deadline:
        task = _rpc(server, "GetTask", {"id": task_id})["result"]
        if task["status"]["state"] == state:
            return task
        time.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached {state}: {task}")
