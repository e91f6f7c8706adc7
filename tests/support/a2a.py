"""Requests and cards for the official a2a-sdk client in tests."""

from __future__ import annotations

from typing import Any

from a2a.types import Message, Part, Role, SendMessageRequest


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
