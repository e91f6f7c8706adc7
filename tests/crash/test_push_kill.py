"""``kill -9`` of the server while a push notification is in flight (issue 30, ADR 0039): the
next server takes the workspace over, claims the delivery again and sends it, with the same
event id (the receiver's dedupe key); the trail shows both attempts and the delivery."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.crash.test_server_recovery import kill_everything
from tests.support.receiver import receiver, settled_trail, state_of
from tests.support.server import RECOVERY_ENV, Server, serve

pytestmark = [pytest.mark.crash, pytest.mark.server]

ENV = {**RECOVERY_ENV, "FOLDLINE_PUSH_ALLOW": "127.0.0.1"}


def _rpc(server: Server, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    status, _, raw = server.request("POST", "/", body, {"Content-Type": "application/json"})
    assert status == 200, raw
    return dict(json.loads(raw))


def test_a_delivery_in_flight_at_a_kill_is_sent_again_by_the_next_server(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with receiver(hold=True) as hook:
        with serve(workspace, ENV) as first:
            message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
            push = {"url": hook.url, "token": "tok"}
            params = {"message": message, "configuration": {"taskPushNotificationConfig": push}}
            task = _rpc(first, "SendMessage", params)["result"]["task"]
            held = hook.wait_for(1)[0]  # the first to arrive (either) hangs in the receiver
            other = hook.wait_for(2)[1]  # the other one is not held back by it
            settled_trail(first, other.headers["x-foldline-event-id"])
            kill_everything(first)
        with serve(workspace, ENV) as second:
            deadline = time.monotonic() + 30
            # Only a caller wakes the takeover (design.md §8): a poller's GetTask does.
            while len(hook.received) < 3 and time.monotonic() < deadline:
                _rpc(second, "GetTask", {"id": task["id"]})
                time.sleep(0.2)
            again = hook.wait_for(3)[2]
            trail = settled_trail(second, held.headers["x-foldline-event-id"])
    print("receiver log:", *hook.log(), sep="\n  ")
    assert again.headers["x-foldline-event-id"] == held.headers["x-foldline-event-id"]
    assert state_of(again.body) == state_of(held.body)
    assert {state_of(held.body), state_of(other.body)} == {
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
    }
    kinds = [e["event_type"] for e in trail]
    assert kinds == ["push.attempt_started", "push.attempt_started", "push.delivered"]
    holders = [e["event"]["holder"] for e in trail[:2]]
    assert holders[0] != holders[1]  # claimed again by the next server, at once
