"""Server-sent events framing."""

from __future__ import annotations

import json
from typing import Any


def event(name: str, data: Any, event_id: int | None = None) -> bytes:
    """One SSE event; ``data`` is sent as a single line of JSON."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def comment(text: str) -> bytes:
    return f": {text}\n\n".encode()
