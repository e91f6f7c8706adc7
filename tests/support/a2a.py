"""Requests and cards for the official a2a-sdk client in tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

from a2a.types import Message, Part, Role, SendMessageRequest

T = TypeVar("T")

# For a shell runner, after it reads its prompt into ``p``: a prompt starting "gate" waits
# until the file ``gate`` is in its working directory, the workspace (at most 60 s), then
# goes on to its answer. A streamed send of such a prompt opens the gate once the stream has
# begun (``gated``): a quick run would otherwise finish before the stream reads its task, and a
# stream of a task already done is that task alone, valid A2A but without the updates a test
# checks.
GATE_WAIT = (
    'case "$p" in gate*) for _ in $(seq 600); do [ -e gate ] && break; sleep 0.1; done;; esac; '
)


async def gated(responses: AsyncIterator[T], gate: Path) -> list[T]:
    """Every response of a streamed send whose run waits on ``gate``, opened once the first
    response (the task) is in."""
    seen: list[T] = []
    async for response in responses:
        seen.append(response)
        if len(seen) == 1:
            gate.touch()
    return seen


def user_message(message_id: str, text: str, **ids: str) -> SendMessageRequest:
    """A one-part text message from the user; ``ids``: ``task_id``, ``context_id``."""
    return SendMessageRequest(
        message=Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)], **ids)
    )


def card_with_only(card: dict[str, Any], version: str) -> dict[str, Any]:
    """The served card with one of its interfaces (and no legacy fields to fall back on), so
    the client picks the transport of ``version``: ``"0.3"`` gives its 0.3 (compat) one."""
    interfaces = [i for i in card["supportedInterfaces"] if i["protocolVersion"] == version]
    trimmed = {k: v for k, v in card.items() if k not in ("url", "protocolVersion")}
    return {**trimmed, "supportedInterfaces": interfaces}
