"""Servers whose runs speak the live channel (ADR 0038), and waits on what their log records."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from tests.support.server import Server

# The example agent of the repository, run by the venv's Python (installed in editable mode).
CHANNEL_RUNNER = f"{sys.executable} -m adapters.programs.channel_agent"
CHANNEL_ENV = {"FOLDLINE_RUNNER": CHANNEL_RUNNER, "FOLDLINE_RUNNER_INPUT": "lines"}


def job_events(server: Server, job_id: str) -> list[dict[str, Any]]:
    """Every event of ``job:<id>`` as ``/v1`` answers it: ``type`` of the event, ``position``
    and the event's fields under ``event``."""
    status, _, raw = server.request("GET", f"/v1/streams/job:{job_id}/events?limit=1000")
    assert status == 200, raw
    return list(json.loads(raw)["events"])


def of_type(events: list[dict[str, Any]], event_type: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event_type"] == event_type]


def wait_for(
    server: Server, job_id: str, event_type: str, count: int = 1, limit: float = 30
) -> list[dict[str, Any]]:
    """The job's events once ``count`` of ``event_type`` are recorded (bounded by ``limit``)."""
    deadline = time.monotonic() + limit
    while True:
        events = job_events(server, job_id)
        if len(of_type(events, event_type)) >= count:
            return events
        assert time.monotonic() < deadline, f"{job_id}: no {count} x {event_type}: {events}"
        time.sleep(0.05)
