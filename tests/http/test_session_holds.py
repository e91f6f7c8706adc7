"""What a session holds (issue 42 goals 1 and 3, ADR 0048), on a real gunicorn with runner
scripts: a session keeps the agent it was created with, and a prompt on a busy session whose
agent takes no input supersedes the running job and hands its prompt on, so the new run answers
both and the first caller is told which job covers its prompt."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import pytest

from adapters.http.schemas import InvocationOut, InvocationReceiptOut
from tests.support.agents import python_agent, workspace_with_agents
from tests.support.channel import job_events, of_type, wait_for
from tests.support.server import Server, read_events, serve

pytestmark = pytest.mark.server

# Says which agent ran and the prompts it got, split where the server joins them (a blank
# line); a first run whose last prompt starts with "hold" waits to be superseded.
AGENT = """
import os, sys, time
prompts = [p.strip() for p in sys.stdin.read().split("\\n\\n")]
print(f"{sys.argv[1]} saw {' | '.join(prompts)}", flush=True)
if prompts[-1].startswith("hold") and os.environ["FOLDLINE_RESUMED"] == "0":
    time.sleep(60)
"""


def _serve(tmp_path: Path) -> Any:
    commands = {name: python_agent(f"agent.py {name}") for name in ("a", "b")}
    workspace, agents = workspace_with_agents(tmp_path, {"agent.py": AGENT}, commands)
    env = {"FOLDLINE_AGENTS_FILE": str(agents), "FOLDLINE_RUNNER": python_agent("agent.py -")}
    return serve(workspace, env, workers=2)


def _invoke(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = server.invoke(body, timeout=90)
    assert status == 200, answer
    return answer  # type: ignore[no-any-return]


def _jobs(server: Server, session: str) -> list[dict[str, Any]]:
    status, _, raw = server.request("GET", f"/v1/jobs?session_id={session}")
    assert status == 200, raw
    return list(json.loads(raw)["jobs"])


def test_session_keeps_its_agent_and_warns_of_another(tmp_path: Path) -> None:
    with _serve(tmp_path) as server:
        first = _invoke(server, {"prompt": "one", "session": "s1", "agent": "a"})
        second = _invoke(server, {"prompt": "two", "session": "s1"})
        third = _invoke(server, {"prompt": "three", "session": "s1", "agent": "b"})
        receipt = _invoke(server, {"prompt": "four", "session": "s1", "agent": "b", "async": True})
        got = _invoke(server, {"get": third["invocation"]})
        unknown = server.invoke({"prompt": "five", "session": "s1", "agent": "nobody"})
        rows = _jobs(server, "s1")

    warning = "session s1 runs agent a; agent b ignored"
    for call in (first, second, third):  # the closing note quotes the three calls
        print(json.dumps({k: call[k] for k in ("session", "agent", "result", "warnings")}))
    assert [first["result"], second["result"], third["result"]] == [
        "a saw one\n",
        "a saw two\n",
        "a saw three\n",
    ]
    assert [first["agent"], second["agent"], third["agent"]] == ["a", "a", "a"]
    assert first["warnings"] == [] and second["warnings"] == []
    assert third["warnings"] == [warning] and got["warnings"] == [warning]
    assert receipt["warnings"] == [warning]
    # The bodies are the ones the OpenAPI document describes.
    msgspec.convert(third, InvocationOut)
    msgspec.convert(receipt, InvocationReceiptOut)
    # An unknown agent is still refused before anything is recorded.
    assert unknown[0] == 400 and "unknown agent 'nobody'" in unknown[1]["error"]
    assert len(rows) == 4 and {row["agent"] for row in rows} == {"a"}
    by_id = {row["job_id"]: row for row in rows}
    assert by_id[third["invocation"]]["agent_ignored"] == "b"
    assert by_id[first["invocation"]]["agent_ignored"] is None


def test_session_without_an_agent_keeps_the_default_one(tmp_path: Path) -> None:
    with _serve(tmp_path) as server:
        first = _invoke(server, {"prompt": "one", "session": "s2"})
        second = _invoke(server, {"prompt": "two", "session": "s2", "agent": "b"})

    assert first["result"] == "- saw one\n" and second["result"] == "- saw two\n"
    assert second["agent"] == "" and second["warnings"] == [
        "session s2 runs the default agent; agent b ignored"
    ]


def test_session_a2a_context_keeps_the_agent_of_its_first_task(tmp_path: Path) -> None:
    with _serve(tmp_path) as server:
        first = _send(server, {"messageId": "m1", "parts": [{"text": "hi"}]}, agent="a")
        context = first["contextId"]
        later = {"messageId": "m2", "contextId": context, "parts": [{"text": "again"}]}
        second = _send(server, later, agent="b")
        rows = _jobs(server, context)

    assert first["artifacts"][0]["parts"][0]["text"] == "a saw hi\n"
    assert second["artifacts"][0]["parts"][0]["text"] == "a saw again\n"
    ran = {(row["agent"], row["agent_ignored"]) for row in rows}
    assert len(rows) == 2 and ran == {("a", None), ("a", "b")}


def test_session_busy_prompt_is_answered_with_the_superseded_one(tmp_path: Path) -> None:
    with _serve(tmp_path) as server, ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_invoke, server, {"prompt": "hold 1", "session": "s1", "id": "k1"})
        first_id = _wait_running(server, "k1")
        second = _invoke(server, {"prompt": "quick 2", "session": "s1"})
        first = waiting.result(timeout=90)
        events = job_events(server, first_id)

    print("second caller:", json.dumps({k: second[k] for k in ("status", "result", "covers")}))
    print("first caller:", json.dumps({k: first[k] for k in ("status", "supersededBy")}))
    assert second["status"] == "ok" and second["result"] == "- saw hold 1 | quick 2\n"
    assert second["covers"] == [first_id]
    assert first["status"] == "superseded" and first["supersededBy"] == second["invocation"]
    assert of_type(events, "job.superseded")[0]["event"]["superseded_by"] == second["invocation"]


def test_session_busy_prompts_fold_transitively_and_the_stream_names_the_cover(
    tmp_path: Path,
) -> None:
    with _serve(tmp_path) as server, ThreadPoolExecutor(1) as pool:
        streaming = pool.submit(_stream, server, {"prompt": "hold 1", "session": "s1", "id": "k1"})
        first_id = _wait_running(server, "k1")
        second = _invoke(server, {"prompt": "hold 2", "session": "s1", "async": True})
        wait_for(server, second["invocation"], "job.output")
        third = _invoke(server, {"prompt": "quick 3", "session": "s1"})
        streamed = streaming.result(timeout=90)
        second_body = _invoke(server, {"get": second["invocation"]})

    assert third["result"] == "- saw hold 1 | hold 2 | quick 3\n"
    assert third["covers"] == [first_id, second["invocation"]]
    result = streamed[-1]
    assert result["event"] == "result" and result["data"]["status"] == "superseded"
    assert result["data"]["supersededBy"] == second["invocation"]
    assert second_body["supersededBy"] == third["invocation"]
    assert second_body["covers"] == [first_id]


def test_session_deliver_false_runs_the_new_prompt_alone(tmp_path: Path) -> None:
    with _serve(tmp_path) as server:
        held = _invoke(server, {"prompt": "hold 1", "session": "s1", "async": True})
        wait_for(server, held["invocation"], "job.output")
        alone = _invoke(server, {"prompt": "quick 2", "session": "s1", "deliver": False})
        first = _invoke(server, {"get": held["invocation"]})

    assert alone["result"] == "- saw quick 2\n" and alone["covers"] == []
    assert first["status"] == "superseded" and first["supersededBy"] == alone["invocation"]


def _wait_running(server: Server, key: str, limit: float = 60) -> str:
    """The job of caller id ``key`` once its run said something (it is running): its id."""
    deadline = time.monotonic() + limit
    while (found := server.invoke({"get": key}))[0] != 200:
        assert found[0] == 404 and time.monotonic() < deadline, found
        time.sleep(0.05)
    job_id = str(found[1]["invocation"])
    wait_for(server, job_id, "job.output", limit=limit)
    return job_id


def _send(server: Server, message: dict[str, Any], agent: str) -> dict[str, Any]:
    """A blocking A2A SendMessage naming ``agent`` in its metadata: the task it answers."""
    params = {"message": {**message, "role": "ROLE_USER", "metadata": {"agent": agent}}}
    body = {"jsonrpc": "2.0", "id": "r", "method": "SendMessage", "params": params}
    status, _, raw = server.request("POST", "/", body, timeout=90)
    answer = json.loads(raw)
    assert status == 200 and "result" in answer, answer
    return answer["result"]["task"]  # type: ignore[no-any-return]


def _stream(server: Server, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The named events of an SSE answer, their data decoded."""
    conn = server.connection(timeout=90)
    try:
        headers = {"Accept": "text/event-stream"}
        conn.request("POST", "/invocations", body=json.dumps(body), headers=headers)
        events = [e for e in read_events(conn.getresponse(), limit=90) if "event" in e]
    finally:
        conn.close()
    return [{**e, "data": json.loads(e["data"])} for e in events]
