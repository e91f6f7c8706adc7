"""A run's question answers the ``/invocations`` caller at once (issue 42, goal 6), on a real
gunicorn with a runner script that asks two questions: the sync answer is the job, still
``running``, with ``waitingForInput`` and its questions; the caller's next prompt on the session
is the answer, whatever ``deliver`` says, and its sync answer waits for the job again; a ``get``
shows the questions and answers none; an SSE stream says ``input_required`` and stays open."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import python_agent
from tests.support.channel import job_events, of_type
from tests.support.server import Server, read_events, serve

pytestmark = pytest.mark.server

# Asks the colour, then the size, each answer a ``respond`` control; prints the order.
ASKER = """\
import json, sys

prompt = json.loads(sys.stdin.readline())
print("order: " + prompt["text"], flush=True)


def ask(request, question):
    signal = {"type": "input_required", "request": request, "question": question}
    print("FOLDLINE: " + json.dumps(signal), flush=True)
    for line in sys.stdin:
        control = json.loads(line)
        if control["type"] == "respond" and control["request"] == request:
            return control["response"]["text"]
        print("took " + control["type"], flush=True)
    sys.exit(3)


colour = ask("colour", "Which colour?")
size = ask("size", "Which size?")
print(colour + " " + size, flush=True)
"""
# A cap far beyond the test's patience: an answer within it is the question's, not the cap's.
SYNC_CAP_S = 300


def _server(tmp_path: Path) -> Iterator[Server]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "asker.py").write_text(ASKER)
    env = {
        "FOLDLINE_RUNNER": python_agent("asker.py"),
        "FOLDLINE_RUNNER_INPUT": "lines",
        "FOLDLINE_SYNC_WAIT_S": str(SYNC_CAP_S),
    }
    with serve(workspace, env, workers=2) as server:
        yield server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from _server(tmp_path)


def _invoke(server: Server, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """The answer, and how long it took (s)."""
    began = time.monotonic()
    status, answer = server.invoke(body, timeout=60)
    assert status == 200, answer
    return answer, time.monotonic() - began


def _asked(request: str, question: str) -> dict[str, Any]:
    return {"waitingForInput": True, "questions": [{"request": request, "question": question}]}


def _controls(server: Server, job_id: str) -> list[dict[str, Any]]:
    return [e["event"] for e in of_type(job_events(server, job_id), "job.control")]


def test_invocations_question_answers_the_sync_caller_and_the_next_prompt_answers_it(
    server: Server,
) -> None:
    first, first_s = _invoke(server, {"prompt": "a shirt", "session": "s1"})
    job_id = first["invocation"]
    got, _ = _invoke(server, {"get": job_id})
    unknown = server.invoke({"prompt": "blue", "session": "s1", "agent": "nope"})
    too_long = server.invoke({"prompt": "x" * 70_000, "session": "s1"})
    controls_after_get = _controls(server, job_id)
    # No ``deliver``, and ``deliver: false``: a prompt on the session answers the question.
    second, second_s = _invoke(server, {"prompt": "blue", "session": "s1", "id": "k2"})
    repeat, _ = _invoke(server, {"prompt": "blue", "session": "s1", "id": "k2"})
    third, _ = _invoke(server, {"prompt": "large", "session": "s1", "deliver": False})
    events = job_events(server, job_id)

    # At once, not at the cap: the job, still running, and its question.
    assert first_s < SYNC_CAP_S / 10, first_s
    assert first["status"] == "running" and first["state"] == "running"
    assert first | _asked("colour", "Which colour?") == first
    assert first["session"] == "s1" and "delivered" not in first
    # A get shows the same question and answers nothing.
    assert got | _asked("colour", "Which colour?") == got and got["invocation"] == job_id
    # Refused answers record nothing: an unknown agent, an answer over 64 KiB of JSON.
    assert unknown[0] == 400 and "nope" in unknown[1]["error"]
    assert too_long[0] == 400 and "response" in too_long[1]["error"]
    assert controls_after_get == []
    # The answer goes into the same job; its sync answer waits for the next question.
    assert second["invocation"] == job_id and second["status"] == "running"
    assert second["delivered"] is True and second["answered"] == "colour"
    assert second | _asked("size", "Which size?") == second
    assert second_s < SYNC_CAP_S / 10, second_s
    assert repeat["invocation"] == job_id and repeat["duplicate"] is True
    # The last answer: the job's end, with both answers in its one result.
    assert third["invocation"] == job_id and third["status"] == "ok"
    assert third["answered"] == "size" and third["control"] > second["control"]
    assert third["result"] == "order: a shirt\nblue large\n"
    assert "waitingForInput" not in third and "questions" not in third
    responds = [
        (c["action"], c["request"], json.loads(c["response"])) for c in _controls(server, job_id)
    ]
    assert responds == [
        ("respond", "colour", {"text": "blue"}),
        ("respond", "size", {"text": "large"}),
    ]
    assert [e["command_id"] for e in of_type(events, "job.control")] == ["inv:k2", None]
    assert len(of_type(events, "job.started")) == 1 and not of_type(events, "job.superseded")
    print(f"\nfirst sync answer after {first_s:.2f} s: {json.dumps(first)}")
    print(f"second sync answer after {second_s:.2f} s: {json.dumps(second)}")
    print(f"third sync answer: {json.dumps(third)}")


def test_invocations_question_is_an_sse_event_and_the_stream_stays_open(server: Server) -> None:
    conn = server.connection(timeout=60)
    body = {"prompt": "socks", "session": "s2", "id": "k1"}
    conn.request("POST", "/invocations", json.dumps(body), {"Accept": "text/event-stream"})
    stream = read_events(conn.getresponse(), limit=60)
    try:
        named: list[dict[str, Any]] = []

        def until(name: str) -> dict[str, Any]:
            for event in stream:
                if "event" in event:
                    named.append({**event, "data": json.loads(event["data"])})
                    if event["event"] == name:
                        return named[-1]
            raise AssertionError(f"the stream ended before {name}: {named}")

        colour = until("input_required")
        # An async answer, from a file: the receipt names the question it answered.
        (server.workspace / "colour.txt").write_text("red")
        answer = {"promptFile": "colour.txt", "session": "s2", "async": True}
        receipt, _ = _invoke(server, answer)
        size = until("input_required")
        done, _ = _invoke(server, {"prompt": "small", "session": "s2"})
        result = until("result")
    finally:
        conn.close()

    job_id = named[0]["data"]["invocation"]
    names = [e["event"] for e in named]
    assert names[0] == "accepted" and names[-1] == "result"
    assert names.count("input_required") == 2 and names.count("result") == 1
    assert colour["data"] == {
        "invocation": job_id,
        "request": "colour",
        "question": "Which colour?",
    }
    assert receipt["status"] == "accepted" and receipt["invocation"] == job_id
    assert receipt["delivered"] is True and receipt["answered"] == "colour"
    assert size["data"]["request"] == "size" and int(size["id"]) > receipt["control"]
    assert done["status"] == "ok" and done["answered"] == "size"
    assert (
        result["data"]["status"] == "ok" and result["data"]["result"] == "order: socks\nred small\n"
    )
    deltas = "".join(e["data"]["text"] for e in named if e["event"] == "delta")
    assert "FOLDLINE:" not in deltas and "red small" in deltas
