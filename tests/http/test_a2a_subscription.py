"""A subscription follows its task to the end (A2A §3.1.6): through a question the run asks
(``input-required``) to the task's terminal state, by the official client in both dialects."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.types import SubscribeToTaskRequest, TaskState
from a2a.utils.errors import InternalError

from tests.crash.test_server_recovery import kill_everything
from tests.support.a2a import card_with_only, user_message
from tests.support.channel import CHANNEL_ENV
from tests.support.server import RECOVERY_ENV, serve

pytestmark = pytest.mark.server


def _state(response: Any) -> str:
    """The task state a stream response carries, by its name."""
    if response.HasField("task"):
        return TaskState.Name(response.task.status.state)
    if response.HasField("status_update"):
        return TaskState.Name(response.status_update.status.state)
    return "artifact"


async def _subscribe_through_a_question(url: str, card: dict[str, Any] | None) -> list[str]:
    """Ask (the task is input-required), subscribe, answer from another client; the states
    the subscription saw, until it ended by itself (bounded by the caller's timeout)."""
    where: Any = url if card is None else parse_agent_card(card)
    blocking = await create_client(where, client_config=ClientConfig(streaming=False))
    streaming = await create_client(where)
    async for response in blocking.send_message(user_message("m-ask", "ask: Which colour?")):
        asked = response.task
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, asked
    seen: list[str] = []
    subscription = streaming.subscribe(SubscribeToTaskRequest(id=asked.id))
    seen.append(_state(await anext(subscription)))  # connected: the task as it stands
    answer = user_message("m-blue", "blue", task_id=asked.id, context_id=asked.context_id)
    async for _ in blocking.send_message(answer):
        pass
    async for response in subscription:  # ends when the server closes the stream
        seen.append(_state(response))
    for client in (blocking, streaming):
        await client.close()
    return seen


@pytest.mark.parametrize("dialect", ["1.0", "0.3"])
def test_a_subscription_sees_the_question_and_then_the_end(tmp_path: Path, dialect: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, CHANNEL_ENV, workers=2) as server:
        url = f"http://127.0.0.1:{server.port}"
        card = json.loads(server.request("GET", "/.well-known/agent-card.json")[2])
        legacy = card_with_only(card, "0.3") if dialect == "0.3" else None
        seen = asyncio.run(asyncio.wait_for(_subscribe_through_a_question(url, legacy), 60))
    print(f"{dialect} subscription saw:", seen)
    assert seen[0] == "TASK_STATE_INPUT_REQUIRED"
    assert "TASK_STATE_WORKING" in seen[1:]  # the answer woke the same task
    assert seen[-1] == "TASK_STATE_COMPLETED"  # and the stream ended only there


async def _asked(url: str) -> tuple[str, str]:
    """A task whose run asked a question (``input-required``): its id and context."""
    client = await create_client(url, client_config=ClientConfig(streaming=False))
    async for response in client.send_message(user_message("m-ask", "ask: Which colour?")):
        asked = response.task
    await client.close()
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, asked
    return asked.id, asked.context_id


async def _subscribe_and_answer(url: str, task_id: str, context_id: str) -> list[str]:
    """Subscribe on the new holder and answer each question the subscription shows (at most
    three); the states it saw until it ended by itself."""
    streaming = await create_client(url)
    blocking = await create_client(url, client_config=ClientConfig(streaming=False))
    seen: list[str] = []
    async for response in streaming.subscribe(SubscribeToTaskRequest(id=task_id)):
        seen.append(_state(response))
        answers = seen.count("TASK_STATE_INPUT_REQUIRED")
        if seen[-1] == "TASK_STATE_INPUT_REQUIRED" and answers <= 3:
            said = user_message(f"m-{answers}", "blue", task_id=task_id, context_id=context_id)
            await _send_when_the_lease_is_free(blocking, said)
    for client in (blocking, streaming):
        await client.close()
    return seen


async def _send_when_the_lease_is_free(client: Any, message: Any, limit: float = 30) -> None:
    """Send, again while the killed holder's lease is not yet stale (a busy workspace is the
    A2A -32603 a caller retries; bounded in time)."""
    deadline = time.monotonic() + limit
    while True:
        try:
            async for _ in client.send_message(message):
                pass
            return
        except InternalError as busy:
            assert "in use" in str(busy) and time.monotonic() < deadline, busy
            await asyncio.sleep(0.25)


@pytest.mark.crash
def test_a_subscription_on_the_new_holder_follows_a_task_cut_off_by_a_kill(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {**RECOVERY_ENV, **CHANNEL_ENV}  # the channel agent, under short lease timings
    with serve(workspace, env) as first:
        task_id, context_id = asyncio.run(_asked(f"http://127.0.0.1:{first.port}"))
        kill_everything(first)  # the question's run dies with its server
    with serve(workspace, env) as second:  # the subscription's read wakes the takeover
        url = f"http://127.0.0.1:{second.port}"
        followed = _subscribe_and_answer(url, task_id, context_id)
        seen = asyncio.run(asyncio.wait_for(followed, 60))
    print("after a kill -9, the new holder's subscription saw:", seen)
    # The task as the killed server left it, asking; the answer, sent as the subscription
    # showed the question, woke it (a new run: the one that asked died with its server).
    assert seen[0] == "TASK_STATE_INPUT_REQUIRED"
    assert "TASK_STATE_WORKING" in seen
    assert seen[-1] == "TASK_STATE_COMPLETED"
