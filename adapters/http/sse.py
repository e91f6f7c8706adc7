"""Server-sent events framing; ``data`` is one line of JSON from the one HTTP codec."""

from __future__ import annotations

from typing import Any

from adapters.http import media

SHUTDOWN = b"event: shutdown\nretry: 1000\ndata: {}\n\n"
"""Sent when the server shuts down: clients reconnect after a second, to another worker."""


def event(name: str, data: Any, event_id: int | None = None) -> bytes:
    """One SSE event; ``data`` (builtins or Structs) is sent as a single line of JSON."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: ".encode() + media.encode(data) + b"\n\n"


def data(payload: Any) -> bytes:
    """An unnamed SSE event carrying ``payload`` as JSON."""
    return b"data: " + media.encode(payload) + b"\n\n"


def comment(text: str) -> bytes:
    return f": {text}\n\n".encode()
