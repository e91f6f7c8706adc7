"""A webhook receiver on loopback for push notification tests: it records every request (its
headers and JSON body) and answers the statuses it is scripted with, then 200. ``hold`` keeps
requests waiting until released (a request in flight when the server is killed)."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    answered: str = "pending"  # the status sent back, or why none reached the sender


@dataclass
class Receiver:
    url: str
    statuses: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    hold: threading.Event | None = None  # set: requests wait until it is cleared
    released: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, limit: float = 30) -> list[Received]:
        """The first ``count`` requests, once they have arrived (bounded)."""
        deadline = time.monotonic() + limit
        with self.arrived:
            while len(self.received) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"{len(self.received)} of {count} requests arrived: {self.log()}"
                self.arrived.wait(left)
            return list(self.received)

    def log(self) -> list[str]:
        """One line per request: the event id header, the task state sent, the answer."""
        lines = []
        for got in self.received:
            answer = got.answered
            lines.append(
                f"{got.headers.get('x-foldline-event-id')} {state_of(got.body)}"
                f" token={got.headers.get('x-a2a-notification-token')}"
                f" auth={got.headers.get('authorization')} -> {answer}"
            )
        return lines


def state_of(body: Any) -> str:
    """The task state a push body tells of, in either dialect."""
    if isinstance(body, dict):
        if "statusUpdate" in body:
            return str(body["statusUpdate"]["status"]["state"])
        if "task" in body:
            return str(body["task"]["status"]["state"])
        if body.get("kind") == "task":
            return str(body["status"]["state"])
    return "?"


@contextmanager
def receiver(statuses: list[int] | None = None, hold: bool = False) -> Iterator[Receiver]:
    got = Receiver(url="", statuses=list(statuses or []))
    if hold:
        got.hold = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            with got.arrived:
                n = len(got.received)
                got.received.append(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                got.arrived.notify_all()
            if got.hold is not None and n == 0:
                got.released.wait(60)  # the first request hangs until released (or the peer dies)
            status = got.statuses[n] if n < len(got.statuses) else 200
            try:
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
                self.wfile.flush()
                got.received[n].answered = str(status)
            except OSError as ex:  # the sender is gone (killed while this one was held)
                got.received[n].answered = f"not answered: {type(ex).__name__}"

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    got.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        got.released.set()
        server.shutdown()
        server.server_close()


def in_transition_order(received: list[Received]) -> list[Received]:
    """Requests in the order of the transitions they tell of. Deliveries are independent (one
    never waits for another), so they arrive in any order; the event id's first number is the
    position of the task event that caused it, and orders them as docs/a2a.md tells receivers."""
    return sorted(received, key=lambda got: int(got.headers["x-foldline-event-id"].split(".")[0]))


def stream_events(server: Any, stream_id: str) -> list[dict[str, Any]]:
    """Every event of a stream as ``/v1`` answers it (``event_type``, ``event``, ...)."""
    status, _, raw = server.request("GET", f"/v1/streams/{stream_id}/events?limit=1000")
    assert status == 200, raw
    return list(json.loads(raw)["events"])


def settled_trail(server: Any, delivery_id: str, limit: float = 30) -> list[dict[str, Any]]:
    """A delivery's trail once it ends in ``push.delivered`` or ``push.dead`` (bounded)."""
    deadline = time.monotonic() + limit
    while True:
        events = stream_events(server, f"push:{delivery_id}")
        if events and events[-1]["event_type"] in ("push.delivered", "push.dead"):
            return events
        assert time.monotonic() < deadline, f"push:{delivery_id} never settled: {events}"
        time.sleep(0.05)
