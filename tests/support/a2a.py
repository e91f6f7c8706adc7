"""Requests for the official a2a-sdk client in tests."""

from __future__ import annotations

from a2a.types import Message, Part, Role, SendMessageRequest


def user_message(message_id: str, text: str, **ids: str) -> SendMessageRequest:
    """A one-part text message from the user; ``ids``: ``task_id``, ``context_id``."""
    return SendMessageRequest(
        message=Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)], **ids)
    )
