"""/v1 on a real gunicorn: the live events feed across workers, and the served document (the
fuzz of every API against it is tests/http/test_fuzz_server.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import Server, read_events, serve

pytestmark = pytest.mark.server


def test_v1_events_follower_sees_events_appended_through_other_workers(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_RUNNER": "cat"}, workers=2) as server:
        conn = server.connection(timeout=30)
        conn.request(
            "GET",
            "/v1/events",
            headers={"Accept": "text/event-stream", "Authorization": f"Bearer {server.token}"},
        )
        answer = conn.getresponse()
        follower = answer.getheader("X-Foldline-Worker")
        events = read_events(answer, limit=60)
        assert next(events) == {"comment": "following"}
        writers, invocations = set(), []
        for i in range(40):  # new connections land on both workers
            if len(writers - {follower}) and len(invocations) >= 6:
                break
            fresh = server.connection()
            fresh.request(
                "POST",
                "/invocations",
                body=json.dumps({"prompt": f"p{i}"}),
                headers={"Connection": "close"},
            )
            reply = fresh.getresponse()
            writers.add(reply.getheader("X-Foldline-Worker"))
            invocations.append(json.loads(reply.read())["invocation"])
            fresh.close()
        assert writers - {follower}, "no request reached the other worker"
        finished: set[str] = set()
        deadline = time.monotonic() + 30
        for event in events:
            if event.get("event") == "job.finished":
                finished.add(json.loads(event["data"])["stream_id"].partition(":")[2])
            if finished >= set(invocations) or time.monotonic() > deadline:
                break
        conn.close()
        assert finished >= set(invocations)


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workspace = tmp_path_factory.mktemp("schemathesis")
    with serve(workspace, {"FOLDLINE_RUNNER": "cat"}, workers=1) as server:
        for name in ("s1", "s2"):
            server.invoke({"prompt": "seed", "session": name})
        yield server


def test_v1_openapi_is_served_by_the_real_server(live_server: Server) -> None:
    status, _, raw = live_server.request("GET", "/openapi.json")
    assert status == 200 and json.loads(raw)["openapi"] == "3.1.0"
    status, _, raw = live_server.request("DELETE", "/v1/sessions")
    assert status == 405
    assert json.loads(raw)["error"]["code"] == "405_method_not_allowed"
