"""``/invocations`` with ``deliver: true`` (ADR 0038), on a real gunicorn with the example agent
(``adapters.programs.channel_agent``): the prompt goes into the session's running job when its run
takes input, as a message; otherwise, and with ``deliver: false``, a new job as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.channel import CHANNEL_ENV, job_events, of_type, wait_for
from tests.support.server import Server, read_events, serve

pytestmark = pytest.mark.server


def _invoke(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = server.invoke(body)
    assert status == 200, answer
    return answer  # type: ignore[no-any-return]


def _waiting(server: Server, session: str) -> str:
    """A ``wait`` job of ``session`` that has begun its first turn and said so (its output
    recorded): its id."""
    receipt = _invoke(server, {"prompt": "wait", "session": session, "async": True})
    wait_for(server, receipt["invocation"], "job.turn_started")
    wait_for(server, receipt["invocation"], "job.output")
    return str(receipt["invocation"])


def _stream(server: Server, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The named events of an SSE answer, their data decoded."""
    conn = server.connection()
    try:
        headers = {"Accept": "text/event-stream"}
        conn.request("POST", "/invocations", body=json.dumps(body), headers=headers)
        events = [e for e in read_events(conn.getresponse()) if "event" in e]
    finally:
        conn.close()
    return [{**e, "data": json.loads(e["data"])} for e in events]


def test_invocations_channel_deliver_goes_into_the_running_job(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, CHANNEL_ENV, workers=2) as server:
        job_id = _waiting(server, "s1")
        body = {"prompt": "more please", "session": "s1", "deliver": True, "id": "k2"}
        receipt = _invoke(server, {**body, "async": True})
        events = wait_for(server, job_id, "job.control_delivered")
        repeat = _invoke(server, {**body, "async": True})
        got = _invoke(server, {"get": "k2"})
        controls_then = len(of_type(job_events(server, job_id), "job.control"))
        done = _invoke(server, {"prompt": "done", "session": "s1", "deliver": True})
        events = job_events(server, job_id)

    (first, *_) = of_type(events, "job.control")
    assert receipt == {
        "status": "accepted",
        "invocation": job_id,
        "session": "s1",
        "id": "k2",
        "delivered": True,
        "control": first["position"],
    }
    assert first["event"]["action"] == "message" and first["event"]["by"] == "invocation"
    assert first["event"]["text"] == "more please" and first["command_id"] == "inv:k2"
    # The same id again: the job it went into, as a duplicate, and no second control.
    assert repeat["invocation"] == job_id and repeat["duplicate"] is True
    assert controls_then == 1 and got["invocation"] == job_id
    # Sync: the job's end, with both messages in its one result.
    assert done["status"] == "ok" and done["invocation"] == job_id
    assert done["delivered"] is True and done["control"] > first["position"]
    assert f"message {first['position']} in t2: more please" in done["result"]
    assert f"message {done['control']} in t3: done" in done["result"]
    assert len(of_type(events, "job.control_delivered")) == 2
    assert not of_type(events, "job.superseded") and len(of_type(events, "job.started")) == 1


def test_invocations_channel_deliver_streams_the_job_from_its_control(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "note.txt").write_text("from a file")
    with serve(workspace, CHANNEL_ENV) as server:
        job_id = _waiting(server, "s1")
        body = {"promptFile": "note.txt", "session": "s1", "deliver": True, "async": True}
        from_file = _invoke(server, body)
        streamed = _stream(server, {"prompt": "done", "session": "s1", "deliver": True})

    assert from_file["invocation"] == job_id and from_file["delivered"] is True
    names = [e["event"] for e in streamed]
    assert names[0] == "accepted" and names[-1] == "result" and "delta" in names
    accepted, result = streamed[0]["data"], streamed[-1]["data"]
    assert accepted["invocation"] == job_id and accepted["delivered"] is True
    # What the run said after the control, not its output from before it.
    deltas = "".join(e["data"]["text"] for e in streamed if e["event"] == "delta")
    assert "working on: wait" not in deltas
    assert f"message {accepted['control']} in t3: done" in deltas
    assert all(int(e["id"]) > accepted["control"] for e in streamed[1:])
    assert result["status"] == "ok" and result["invocation"] == job_id
    assert f"message {from_file['control']} in t2: from a file" in result["result"]


def test_invocations_channel_deliver_false_supersedes_as_before(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, CHANNEL_ENV) as server:
        job_id = _waiting(server, "s1")
        answer = _invoke(server, {"prompt": "next", "session": "s1", "deliver": False})
        superseded = of_type(job_events(server, job_id), "job.superseded")

    assert answer["invocation"] != job_id and answer["status"] == "ok"
    assert answer["result"] == "done: next\n" and "delivered" not in answer
    assert [e["event"]["superseded_by"] for e in superseded] == [answer["invocation"]]


def test_invocations_channel_deliver_without_a_running_job_starts_one(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, CHANNEL_ENV) as server:
        first = _invoke(server, {"prompt": "hello", "session": "s1", "deliver": True})
        # The session's job has ended: a second delivery starts a new job too.
        second = _invoke(server, {"prompt": "again", "session": "s1", "deliver": True})

    assert first["status"] == "ok" and first["result"] == "done: hello\n"
    assert second["status"] == "ok" and second["result"] == "done: again\n"
    assert second["invocation"] != first["invocation"]
    assert "delivered" not in first and "delivered" not in second
