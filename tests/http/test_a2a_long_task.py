"""A2A streams end with the task, not at the sync cap (issue 25, goal 2): with
``FOLDLINE_SYNC_WAIT_S=1`` and a job that prints three chunks over 3 s, the official a2a-sdk
client, 1.0 and 0.3 transports, streams (SendStreamingMessage / ``message/stream``) and
subscriptions (SubscribeToTask / ``tasks/resubscribe``) all get every chunk and the final
status; only a blocking SendMessage answers at the cap, with the task still working."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from a2a.client import Client, ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.types import GetTaskRequest, StreamResponse, SubscribeToTaskRequest, TaskState

from tests.support.a2a import card_with_only, user_message
from tests.support.server import serve

pytestmark = pytest.mark.server

CAP_S = 1.0
# Three chunks a second apart, then a last second of silence: the job lasts 3 s, three caps.
RUNNER = 'read -r p; printf "one "; sleep 1; printf "two "; sleep 1; printf "three"; sleep 1'
ENV = {"FOLDLINE_RUNNER": RUNNER, "FOLDLINE_SYNC_WAIT_S": str(CAP_S)}
PATIENCE_S = 60  # every scenario together, on a loaded machine

Timed = list[tuple[float, StreamResponse]]


async def _timed(responses: AsyncIterator[StreamResponse]) -> Timed:
    """Each response with the seconds since the call began."""
    started = time.monotonic()
    return [(time.monotonic() - started, response) async for response in responses]


def trace(timed: Timed) -> list[str]:
    """The events as a reader checks them: time, kind, state or chunk."""
    lines = []
    for at, response in timed:
        kind = str(response.WhichOneof("payload"))
        if kind == "task":
            what = TaskState.Name(response.task.status.state)
        elif kind == "status_update":
            what = TaskState.Name(response.status_update.status.state)
        elif kind == "artifact_update":
            update = response.artifact_update
            what = f"{update.artifact.parts[0].text!r} append={update.append}"
            what += f" last_chunk={update.last_chunk}"
        else:
            what = ""
        lines.append(f"{at:5.2f}s {kind} {what}")
    return lines


async def _subscribed(sender: Client, subscriber: Client, message_id: str) -> Timed:
    """Start a task without waiting for it, then follow it from its first seconds."""
    async for response in sender.send_message(user_message(message_id, "subscribed")):
        task_id = response.task.id
    return await _timed(subscriber.subscribe(SubscribeToTaskRequest(id=task_id)))


async def _blocking(blocking: Client, follower: Client) -> dict[str, Any]:
    """A blocking send capped at 1 s, then the same task followed to its end and read."""
    started = time.monotonic()
    async for response in blocking.send_message(user_message("m-blocking", "blocking")):
        capped = response.task
    elapsed = time.monotonic() - started
    followed = await _timed(follower.subscribe(SubscribeToTaskRequest(id=capped.id)))
    later = await blocking.get_task(GetTaskRequest(id=capped.id))
    return {"capped": capped, "elapsed": elapsed, "followed": followed, "later": later}


async def _scenario(url: str, card: dict[str, Any]) -> dict[str, Any]:
    legacy = parse_agent_card(card_with_only(card, "0.3"))
    modern = await create_client(url)  # the defaults: 1.0, streaming
    compat = await create_client(legacy)
    polling = await create_client(url, client_config=ClientConfig(streaming=False, polling=True))
    compat_polling = await create_client(
        legacy, client_config=ClientConfig(streaming=False, polling=True)
    )
    blocking = await create_client(url, client_config=ClientConfig(streaming=False))
    clients = (modern, compat, polling, compat_polling, blocking)
    try:
        # All at once: each lasts the job's 3 s, and none may be cut at the 1 s cap.
        results = await asyncio.wait_for(
            asyncio.gather(
                _timed(modern.send_message(user_message("m-1.0", "streamed"))),
                _timed(compat.send_message(user_message("m-0.3", "streamed"))),
                _subscribed(polling, modern, "m-sub-1.0"),
                _subscribed(compat_polling, compat, "m-sub-0.3"),
                _blocking(blocking, modern),
            ),
            PATIENCE_S,
        )
    finally:
        for client in clients:
            await client.close()
    names = ("stream_1_0", "stream_0_3", "subscribe_1_0", "subscribe_0_3", "blocking")
    return dict(zip(names, results, strict=True))


def _chunks(timed: Timed) -> list[Any]:
    return [r.artifact_update for _, r in timed if r.HasField("artifact_update")]


def _assert_ends_with_the_task(timed: Timed) -> None:
    """The stream's last event is the final status, after the whole result, past the cap."""
    shown = "\n".join(trace(timed))
    last_at, last = timed[-1]
    assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED, shown
    assert last_at > CAP_S, shown
    final = _chunks(timed)[-1]
    assert (final.artifact.parts[0].text, final.last_chunk) == ("one two three", True), shown


def _assert_live(timed: Timed) -> None:
    """Task, working, each chunk as printed (a second apart, so seconds before the end)."""
    shown = "\n".join(trace(timed))
    assert timed[0][1].HasField("task"), shown
    assert timed[1][1].status_update.status.state == TaskState.TASK_STATE_WORKING, shown
    live = [(at, r.artifact_update) for at, r in timed if r.HasField("artifact_update")][:-1]
    assert [u.artifact.parts[0].text for _, u in live] == ["one ", "two ", "three"], shown
    assert [u.append for _, u in live] == [False, True, True], shown
    assert live[0][0] < timed[-1][0] - 2 * CAP_S, shown  # "one " came two caps before the end
    assert timed[-1][0] > 2 * CAP_S, shown  # the stream lasted the job: well past the cap


def test_a2a_streams_and_subscriptions_outlive_the_sync_cap_and_end_with_the_task(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, ENV, workers=2) as server:
        card = json.loads(server.request("GET", "/.well-known/agent-card.json")[2])
        seen = asyncio.run(_scenario(f"http://127.0.0.1:{server.port}", card))

    print("the 1.0 stream, seconds since the call:", *trace(seen["stream_1_0"]), sep="\n")
    for name in ("stream_1_0", "stream_0_3"):
        _assert_live(seen[name])
        _assert_ends_with_the_task(seen[name])
    for name in ("subscribe_1_0", "subscribe_0_3"):
        subscribed = seen[name]
        assert subscribed[0][1].HasField("task"), "\n".join(trace(subscribed))
        _assert_ends_with_the_task(subscribed)

    blocking = seen["blocking"]
    # The cap answers the task as it stands, still working (the job prints for 3 s), no error.
    assert blocking["capped"].status.state == TaskState.TASK_STATE_WORKING
    assert CAP_S <= blocking["elapsed"] < 3 * CAP_S
    _assert_ends_with_the_task(blocking["followed"])
    later = blocking["later"]
    assert later.id == blocking["capped"].id
    assert later.status.state == TaskState.TASK_STATE_COMPLETED
    assert later.artifacts[0].parts[0].text == "one two three"
