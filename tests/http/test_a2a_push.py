"""A2A push notifications (issue 30, ADR 0039) against a real gunicorn, with the official
a2a-sdk client (its push config calls in both dialects) and a real receiver on loopback: the
final status arrives once per config, a 404 makes a delivery dead at once, ``/ping`` stays busy
while a delivery is owed, and a URL the policy refuses is -32602."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageConfiguration,
    TaskPushNotificationConfig,
)

from tests.support.a2a import card_with_only, user_message
from tests.support.agents import python_agent
from tests.support.coordination import CALL
from tests.support.receiver import (
    Receiver,
    in_transition_order,
    receiver,
    settled_trail,
    state_of,
)
from tests.support.server import Server, read_events, serve

pytestmark = pytest.mark.server

RUNNER = 'read -r p; case "$p" in sleepy*) sleep 30;; *) printf "echo: %s" "$p";; esac'
ENV = {"FOLDLINE_RUNNER": RUNNER, "FOLDLINE_PUSH_ALLOW": "127.0.0.1"}


def _config(url: str, **kw: Any) -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(url=url, **kw)


async def _modern(url: str, hook: str, other: str, third: str) -> dict[str, Any]:
    """1.0: a config on SendMessage, then the four config methods on a long task."""
    seen: dict[str, Any] = {}
    client = await create_client(url, client_config=ClientConfig(streaming=False))
    request = user_message("m-push", "hello")
    auth = AuthenticationInfo(scheme="Bearer", credentials="sekret")
    request.configuration.CopyFrom(
        SendMessageConfiguration(
            task_push_notification_config=_config(hook, id="c1", token="tok", authentication=auth)
        )
    )
    async for response in client.send_message(request):
        seen["done"] = response.task
    sleepy = user_message("m-sleepy", "sleepy")
    sleepy.configuration.return_immediately = True
    async for response in client.send_message(sleepy):
        seen["sleepy"] = response.task
    task_id = seen["sleepy"].id
    seen["created"] = await client.create_task_push_notification_config(
        _config(other, task_id=task_id, id="c2", token="t2")
    )
    seen["got"] = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task_id, id="c2")
    )
    seen["listed"] = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id)
    )
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="c2")
    )
    seen["after_delete"] = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id)
    )
    for config_id in ("c3", "c4"):  # two configs, one receiver: each hears the end once
        await client.create_task_push_notification_config(
            _config(third, task_id=task_id, id=config_id)
        )
    seen["canceled"] = await client.cancel_task(CancelTaskRequest(id=task_id))
    await client.close()
    return seen


def test_push_a2a_sdk_1_0_final_status_arrives_once_per_config(tmp_path: Path) -> None:
    with (
        receiver() as hook,
        receiver() as other,
        receiver() as third,
        serve(tmp_path, ENV) as server,
    ):
        url = f"http://127.0.0.1:{server.port}"
        seen = asyncio.run(_modern(url, hook.url, other.url, third.url))
        got = in_transition_order(hook.wait_for(2))
        ends = third.wait_for(2)
        end_trails = [settled_trail(server, e.headers["x-foldline-event-id"]) for e in ends]
        trail = settled_trail(server, got[-1].headers["x-foldline-event-id"])
        listed = _rpc(server, "ListTasks", {})["result"]["tasks"]
    print("receiver log:", *hook.log(), sep="\n  ")
    assert [state_of(g.body) for g in got] == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    final = got[-1]
    assert final.body["task"]["id"] == seen["done"].id
    assert final.body["task"]["artifacts"][0]["parts"] == [{"text": "echo: hello"}]
    assert final.headers["x-a2a-notification-token"] == "tok"
    assert final.headers["authorization"] == "Bearer sekret"
    assert len({g.headers["x-foldline-event-id"] for g in got}) == 2
    assert [e["event_type"] for e in trail] == ["push.attempt_started", "push.delivered"]
    assert seen["created"].id == "c2" and seen["created"].url == other.url
    assert seen["got"].url == other.url and seen["got"].token == ""  # secrets never answered
    assert [c.id for c in seen["listed"].configs] == ["c2"]
    assert list(seen["after_delete"].configs) == []
    assert other.received == []  # the sleepy task never moved while c2 was set
    assert [state_of(e.body) for e in ends] == ["TASK_STATE_CANCELED"] * 2
    assert len({e.headers["x-foldline-event-id"] for e in ends}) == 2  # one per config
    for end_trail in end_trails:  # each sent once, and settled: never sent again
        assert [e["event_type"] for e in end_trail] == ["push.attempt_started", "push.delivered"]
    assert len(third.received) == 2
    assert len(listed) == 2


async def _legacy(card: dict[str, Any], hook: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    client = await create_client(
        parse_agent_card(card_with_only(card, "0.3")), client_config=ClientConfig(streaming=False)
    )
    sleepy = user_message("m-old", "sleepy")
    sleepy.configuration.return_immediately = True
    async for response in client.send_message(sleepy):
        seen["task"] = response.task
    task_id = seen["task"].id
    auth = AuthenticationInfo(scheme="Bearer", credentials="old")
    seen["created"] = await client.create_task_push_notification_config(
        _config(hook, task_id=task_id, id="legacy", authentication=auth)
    )
    seen["got"] = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task_id, id="legacy")
    )
    seen["listed"] = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id)
    )
    await client.close()
    return seen


def test_push_a2a_sdk_0_3_configs_and_a_0_3_payload(tmp_path: Path) -> None:
    with receiver() as hook, serve(tmp_path, ENV) as server:
        seen = asyncio.run(_legacy(_card(server), hook.url))
        task_id = seen["task"].id
        canceled = _rpc(server, "CancelTask", {"id": task_id})
        got = hook.wait_for(1)  # made while it worked: only its end is news
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert seen["created"].id == "legacy" and seen["got"].url == hook.url
    assert seen["got"].authentication.scheme == "Bearer"
    assert seen["got"].authentication.credentials == ""  # never answered back
    assert [c.id for c in seen["listed"].configs] == ["legacy"]
    assert len(got) == 1
    final = got[-1].body
    assert final["kind"] == "task" and final["id"] == task_id
    assert final["status"]["state"] == "canceled"
    assert got[-1].headers["authorization"] == "Bearer old"


def test_push_a_404_receiver_is_dead_at_once_and_a_refused_url_is_32602(tmp_path: Path) -> None:
    # Two workers, two deliverers: the log gives each delivery to one of them.
    with receiver([404, 404]) as hook, serve(tmp_path, ENV, workers=2) as server:
        answer = _send(server, "m-1", "hi", {"url": hook.url})
        got = hook.wait_for(2)  # working and completed, in either order: each tried once
        trails = [settled_trail(server, g.headers["x-foldline-event-id"]) for g in got]
        refused = _send(server, "m-2", "hi", {"url": "http://169.254.169.254/latest"})
        loopback = _send(server, "m-3", "hi", {"url": "http://localhost:1/x"})
        scheme = _send(server, "m-4", "hi", {"url": "file:///etc/passwd"})
        header = _send(server, "m-5", "hi", {"url": hook.url, "token": "a\r\nX-Evil: 1"})
        tasks = _rpc(server, "ListTasks", {})["result"]["totalSize"]
        _, _, metrics = server.request("GET", "/metrics")
    print("receiver log (404):", *hook.log(), sep="\n  ")
    assert 'foldline_push_deliveries{progress="dead"} 2' in metrics.decode()
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    for trail in trails:  # dead is final: never tried again
        assert [e["event_type"] for e in trail] == ["push.attempt_started", "push.dead"]
        assert trail[-1]["event"]["reason"] == "the receiver answered 404"
    assert len(hook.received) == 2
    for error, why in (
        (refused, "metadata"),
        (loopback, "loopback"),
        (scheme, "http"),
        (header, "visible ASCII"),
    ):
        assert error["error"]["code"] == -32602 and why in error["error"]["message"], error
    assert tasks == 1  # refused messages made no task


def test_push_ping_is_busy_while_a_delivery_is_owed(tmp_path: Path) -> None:
    with receiver(hold=True) as hook, serve(tmp_path, ENV) as server:
        _send(server, "m-1", "hi", {"url": hook.url})
        hook.wait_for(1)  # the first delivery to arrive hangs in the receiver
        held = _ping(server)
        hook.released.set()
        hook.wait_for(2)
        healthy = _wait_ping(server, "Healthy")
    assert held == "HealthyBusy"
    assert healthy == "Healthy"


# -- helpers -----------------------------------------------------------------------------------


def _card(server: Server) -> dict[str, Any]:
    status, _, raw = server.request("GET", "/.well-known/agent-card.json")
    assert status == 200
    return dict(json.loads(raw))


def _rpc(server: Server, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    status, _, raw = server.request("POST", "/", body, {"Content-Type": "application/json"})
    assert status == 200, raw
    return dict(json.loads(raw))


def _send(server: Server, mid: str, text: str, push: dict[str, Any]) -> dict[str, Any]:
    message = {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}
    params = {"message": message, "configuration": {"taskPushNotificationConfig": push}}
    return _rpc(server, "SendMessage", params)


def _ping(server: Server) -> str:
    status, _, raw = server.request("GET", "/ping")
    assert status == 200
    return str(json.loads(raw)["status"])


def _wait_ping(server: Server, wanted: str, limit: float = 30) -> str:
    deadline = time.monotonic() + limit
    while (status := _ping(server)) != wanted and time.monotonic() < deadline:
        time.sleep(0.05)
    return status


__all__ = ["Receiver"]


SNOOP = (
    CALL
    + """
status, job = call("GET", "/v1/jobs/" + os.environ["FOLDLINE_JOB_ID"])
status, page = call("GET", "/v1/streams/task:" + job["task_id"] + "/events")
kind = "task.push_config_set"
configs = [e["event"]["config"] for e in page["events"] if e["event_type"] == kind]
rpc = {"jsonrpc": "2.0", "id": 1, "method": "ListTaskPushNotificationConfigs",
       "params": {"taskId": job["task_id"]}}
request = urllib.request.Request(os.environ["FOLDLINE_URL"] + "/", data=json.dumps(rpc).encode(),
                                 headers={"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=30) as answer:
    listed = json.load(answer)["result"]["configs"]
print(json.dumps([configs, listed]))
"""
)


def test_push_a_run_reads_its_task_without_the_callers_push_secrets(tmp_path: Path) -> None:
    (tmp_path / "snoop.py").write_text(SNOOP)
    env = {**ENV, "FOLDLINE_RUNNER": python_agent(str(tmp_path / "snoop.py"))}
    with receiver() as hook, serve(tmp_path, env) as server:
        auth = {"scheme": "Bearer", "credentials": "sekret-9c1e"}
        answer = _send(
            server, "m-1", "hi", {"url": hook.url, "token": "tok-4f2a", "authentication": auth}
        )
        hook.wait_for(2)
    result = answer["result"]["task"]["artifacts"][0]["parts"][0]["text"]
    (config,), (listed,) = json.loads(result)
    assert config["url"] == hook.url
    assert (config["token"], config["credentials"]) == ("(hidden)", "(hidden)")
    # Through A2A, open to any caller: the scheme, never the secrets.
    assert listed["url"] == hook.url and listed["authentication"] == {"scheme": "Bearer"}
    assert "token" not in listed and "sekret-9c1e" not in result and "tok-4f2a" not in result


def test_push_configs_make_no_status_updates_on_a_subscribed_stream(tmp_path: Path) -> None:
    with receiver() as hook, serve(tmp_path, ENV) as server:
        message = {"messageId": "m-s", "role": "ROLE_USER", "parts": [{"text": "sleepy"}]}
        params = {"message": message, "configuration": {"returnImmediately": True}}
        task_id = _rpc(server, "SendMessage", params)["result"]["task"]["id"]
        conn = server.connection()
        body = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task_id}}
        conn.request("POST", "/", json.dumps(body), {"Content-Type": "application/json"})
        answer = conn.getresponse()
        frames = read_events(answer)
        first = next(e for e in frames if "data" in e)  # the Task: the stream is live
        for n in range(3):
            made = _rpc(
                server,
                "CreateTaskPushNotificationConfig",
                {"taskId": task_id, "id": f"c{n}", "url": hook.url},
            )
            assert made["result"]["id"] == f"c{n}"
        _rpc(server, "CancelTask", {"id": task_id})
        rest = [json.loads(e["data"])["result"] for e in frames if "data" in e]
        conn.close()
        ends = hook.wait_for(3)
    assert "task" in json.loads(first["data"])["result"]
    updates = [r["statusUpdate"]["status"]["state"] for r in rest if "statusUpdate" in r]
    assert updates == ["TASK_STATE_WORKING", "TASK_STATE_CANCELED"]  # none per config made
    assert [state_of(e.body) for e in ends] == ["TASK_STATE_CANCELED"] * 3


def test_push_the_final_task_carries_the_results_files(tmp_path: Path) -> None:
    runner = 'read -r p; printf "report" > out.txt; echo "done"; echo "MEDIA:out.txt"'
    env = {**ENV, "FOLDLINE_RUNNER": runner}
    with receiver() as hook, serve(tmp_path, env) as server:
        _send(server, "m-1", "hi", {"url": hook.url})
        final = in_transition_order(hook.wait_for(2))[-1].body
    parts = final["task"]["artifacts"][0]["parts"]
    assert parts[1] == {
        "raw": base64.b64encode(b"report").decode(),
        "filename": "out.txt",
        "mediaType": "text/plain",
    }
