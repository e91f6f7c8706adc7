"""Controls into a run's live channel over ``/v1`` (ADR 0038), through a real ``foldline serve``
whose default agent is the example channel agent (``adapters.programs.channel_agent``): a control is
recorded, then delivered into the run, and the run's output says it took it; every refusal
records nothing. Waits are on recorded events (``tests.support.channel.wait_for``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, get_args, get_type_hints

import pytest

from adapters.http.schemas import EffortIn
from engine.domain import channel as ch
from tests.support.channel import CHANNEL_ENV, job_events, of_type, wait_for
from tests.support.server import Server, serve

pytestmark = pytest.mark.server

# Beside the channel agent (the default): an agent whose run takes no input, and one that
# says its run token and stays running (a live run that is no ancestor of anything).
AGENTS = """
[agents.plain]
command = "cat >/dev/null; sleep 30"
[agents.tokener]
command = {tokener}
"""
TOKENER = 'echo "TOKEN $FOLDLINE_RUN_TOKEN"; cat >/dev/null; sleep 30'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("channel")
    workspace = root / "ws"
    workspace.mkdir()
    agents = root / "agents.toml"
    agents.write_text(AGENTS.format(tokener=json.dumps(TOKENER)))
    with serve(workspace, {**CHANNEL_ENV, "FOLDLINE_AGENTS_FILE": str(agents)}) as running:
        yield running


def _start(server: Server, prompt: str, agent: str = "") -> str:
    """A job started asynchronously in a session of its own (a new invocation in a session
    supersedes the one running there); its id."""
    body = {"prompt": prompt, "async": True, **({"agent": agent} if agent else {})}
    status, answer = server.invoke(body)
    assert status in (200, 202), answer
    return str(answer["invocation"])


def _spawn(server: Server, session: str, prompt: str) -> str:
    """A top-level job the operator spawns into ``session``; its id."""
    status, answer = _send_to(server, "/v1/jobs", {"session": session, "prompt": prompt})
    assert status == 201, answer
    return str(answer["jobs"][0]["job_id"])


def _job(server: Server, job_id: str) -> dict[str, Any]:
    status, _, raw = server.request("GET", f"/v1/jobs/{job_id}")
    assert status == 200, raw
    return dict(json.loads(raw))


def _send_to(server: Server, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    payload = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    status, _, raw = server.request(
        "POST", path, payload, {"Content-Type": "application/json", **headers}
    )
    return status, json.loads(raw)


def _send(
    server: Server,
    job_id: str,
    action: str,
    body: Any = None,
    *,
    revised: bool = True,
    **headers: str,
) -> tuple[int, Any]:
    """POST a channel control; ``If-Match`` is the job's control revision now (ADR 0057)
    unless ``headers`` name one, or ``revised`` is false (none at all)."""
    if revised and "If-Match" not in headers:
        status, _, raw = server.request("GET", f"/v1/jobs/{job_id}", headers=headers)
        if status == 200:
            headers = {**headers, "If-Match": str(json.loads(raw)["control_revision"])}
    return _send_to(server, f"/v1/jobs/{job_id}/{action}", body, **headers)


def _waiting(server: Server) -> str:
    """A ``wait`` job of the channel agent, its turn ``t1`` active."""
    job_id = _start(server, "wait for controls")
    wait_for(server, job_id, "job.turn_started")
    assert _job(server, job_id)["turn"] == "t1"
    return job_id


def _controls(server: Server, job_id: str) -> int:
    return len(of_type(job_events(server, job_id), "job.control"))


def _result(server: Server, job_id: str) -> str:
    wait_for(server, job_id, "job.finished")
    job = _job(server, job_id)
    assert job["state"] == "ok", job
    return str(job["result"])


def _code(answer: Any) -> str:
    return str(answer["error"]["code"])


def test_channel_steer_with_the_active_turn_is_delivered_and_taken(server: Server) -> None:
    job_id = _waiting(server)
    status, sent = _send(server, job_id, "steer", {"text": "look left", "turn": "t1"})
    assert status == 202, sent
    steer = sent["control"]
    assert sent["job"]["job_id"] == job_id and sent["job"]["turn"] == "t1"
    events = wait_for(server, job_id, "job.control_delivered")
    [control] = of_type(events, "job.control")
    assert control["position"] == steer
    assert control["event"]["action"] == "steer" and control["event"]["by"] == "operator"
    assert of_type(events, "job.control_delivered")[0]["event"]["control"] == steer
    status, sent = _send(server, job_id, "effort", {"effort": "high"})
    assert status == 202, sent
    effort = sent["control"]
    status, sent = _send(server, job_id, "finalize")  # no body: the rule's text
    assert status == 202, sent
    result = _result(server, job_id)
    assert f"steer {steer} in t1: look left" in result
    assert f"effort {effort}: high" in result
    assert f"finalize {sent['control']}: {ch.FINALIZE_TEXT}" in result


def test_channel_interrupt_ends_the_turn_and_a_stale_turn_records_nothing(
    server: Server,
) -> None:
    job_id = _waiting(server)
    before = _controls(server, job_id)
    for action, body in (("steer", {"text": "x", "turn": "t9"}), ("interrupt", {"turn": "t0"})):
        status, answer = _send(server, job_id, action, body)
        assert (status, _code(answer)) == (409, "stale_turn"), answer
    assert _controls(server, job_id) == before
    status, sent = _send(server, job_id, "interrupt", {"turn": "t1"})
    assert status == 202, sent
    wait_for(server, job_id, "job.turn_ended")
    assert _job(server, job_id)["turn"] is None
    # No turn is active now: a steer for the old one is stale too.
    status, answer = _send(server, job_id, "steer", {"text": "x", "turn": "t1"})
    assert (status, _code(answer)) == (409, "stale_turn"), answer
    status, sent = _send(server, job_id, "finalize", {"text": "wrap up"})
    assert status == 202, sent
    assert "t1 stopped" in _result(server, job_id)


def test_channel_respond_answers_the_pending_request_only(server: Server) -> None:
    waiting = _waiting(server)
    status, answer = _send(server, waiting, "respond", {"request": "q1", "response": {}})
    assert (status, _code(answer)) == (409, "unknown_request"), answer
    assert _controls(server, waiting) == 0
    job_id = _start(server, "ask: which way?")
    wait_for(server, job_id, "job.input_requested")
    assert _job(server, job_id)["pending_requests"] == 1
    status, answer = _send(server, job_id, "respond", {"request": "q2", "response": {}})
    assert (status, _code(answer)) == (409, "unknown_request"), answer
    status, sent = _send(
        server, job_id, "respond", {"request": "q1", "response": {"text": "north"}}
    )
    assert status == 202, sent
    assert sent["job"]["pending_requests"] == 0
    assert "answer to q1: north" in _result(server, job_id)
    status, _, raw = server.request("GET", f"/v1/jobs/{job_id}/controls")
    assert status == 200, raw
    listed = json.loads(raw)
    [control] = listed["controls"]
    assert control["action"] == "respond" and control["state"] == "delivered"
    assert control["body"] == {
        "id": sent["control"],
        "type": "respond",
        "request": "q1",
        "response": {"text": "north"},
    }
    [request] = listed["requests"]
    assert request["request"] == "q1" and request["question"] == "which way?"
    assert request["state"] == "answered" and request["answer"] == sent["control"]
    _send(server, waiting, "finalize")
    _result(server, waiting)


def _token_of(server: Server, job_id: str) -> str:
    outputs = of_type(wait_for(server, job_id, "job.output"), "job.output")
    output = "".join(e["event"]["text"] for e in outputs)
    return output.split("TOKEN ", 1)[1].split()[0]


def test_channel_refusals_record_nothing(server: Server) -> None:
    job_id = _waiting(server)
    revision = _job(server, job_id)["control_revision"]
    refused: list[tuple[str, Any, dict[str, str], int, str]] = [
        ("steer", {"text": "x" * (ch.STEER_LIMIT + 1), "turn": "t1"}, {}, 400, "invalid_argument"),
        ("steer", {"text": "", "turn": "t1"}, {}, 400, "invalid_argument"),
        ("steer", {"text": "x", "turn": "t1", "extra": 1}, {}, 400, "invalid_argument"),
        ("steer", {"text": "x"}, {}, 400, "invalid_argument"),
        ("steer", b"not json", {}, 400, "invalid_argument"),
        ("interrupt", None, {}, 400, "invalid_argument"),
        ("effort", {"effort": "max"}, {}, 400, "invalid_argument"),
        ("finalize", {"text": "x" * (ch.STEER_LIMIT + 1)}, {}, 400, "invalid_argument"),
        # 64 KiB of JSON is the response's limit: more is a value outside its limits.
        ("respond", {"request": "q1", "response": {"a": "x" * ch.RESPONSE_LIMIT}}, {}, 400,
         "invalid_argument"),
        ("respond", {"request": "q1", "response": "text"}, {}, 400, "invalid_argument"),
        ("steer", {"text": "x", "turn": "t1"}, {"If-Match": str(revision + 5)}, 412,
         "stale_revision"),
    ]  # fmt: skip
    for action, body, headers, wanted, code in refused:
        status, answer = _send(server, job_id, action, body, **headers)
        assert (status, _code(answer)) == (wanted, code), (action, body, answer)
    status, answer = _send(server, job_id, "steer", {"text": "x", "turn": "t1"}, revised=False)
    assert (status, _code(answer)) == (428, "precondition_required"), answer
    status, answer = _send(server, job_id, "steer", b"x" * (8 * ch.RESPONSE_LIMIT + 1))
    assert status == 413, answer
    status, answer = _send(server, "job_nope", "steer", {"text": "x", "turn": "t1"})
    assert (status, _code(answer)) == (404, "not_found"), answer
    status, _, raw = server.request(
        "POST", f"/v1/jobs/{job_id}/finalize", b"{}", {"Content-Type": "application/json"},
        authorize=False,
    )  # fmt: skip
    assert status == 401, raw
    # A live run of another session, and of the same session but no ancestor of the job.
    tokener = _start(server, "t", agent="tokener")
    bearer = {"Authorization": f"Bearer {_token_of(server, tokener)}"}
    status, answer = _send(server, job_id, "finalize", {}, **bearer)
    assert (status, _code(answer)) == (403, "forbidden"), answer
    beside = _spawn(server, _job(server, tokener)["session_id"], "wait beside it")
    wait_for(server, beside, "job.turn_started")
    # It cannot read the job's revision (ADR 0065), so the operator's reading is sent along.
    revised = {**bearer, "If-Match": str(_job(server, beside)["control_revision"])}
    status, answer = _send(server, beside, "finalize", {}, **revised)
    assert (status, _code(answer)) == (403, "forbidden"), answer
    status, _, raw = server.request("GET", f"/v1/jobs/{beside}/controls", headers=bearer)
    # A job beside it is no descendant: its controls are not the run's to read (ADR 0065).
    assert status == 403 and b"result_visibility" in raw, raw
    assert _controls(server, beside) == 0
    plain = _start(server, "p", agent="plain")
    wait_for(server, plain, "job.started")
    status, answer = _send(server, plain, "steer", {"text": "x", "turn": "t1"})
    assert (status, _code(answer)) == (409, "no_channel"), answer
    assert _controls(server, job_id) == 0 and _controls(server, plain) == 0
    status, sent = _send(server, job_id, "finalize", {}, **{"If-Match": str(revision)})
    assert status == 202, sent
    _result(server, job_id)
    for other in (tokener, plain, beside):
        server.request("POST", f"/v1/jobs/{other}/cancel")


def test_channel_controls_are_listed_and_counted(server: Server) -> None:
    job_id = _waiting(server)
    ids = [_send(server, job_id, "effort", {"effort": e})[1]["control"] for e in ("low", "high")]
    wait_for(server, job_id, "job.control_delivered", count=2)
    status, _, raw = server.request("GET", f"/v1/jobs/{job_id}/controls")
    assert status == 200, raw
    listed = json.loads(raw)
    assert [c["control"] for c in listed["controls"]] == ids[::-1]  # newest first
    newest = listed["controls"][0]
    assert newest["body"] == {"id": ids[1], "type": "effort", "effort": "high"}
    assert newest["state"] == "delivered" and newest["sent_by"] == "operator"
    assert newest["run_id"] and newest["settled_at"] and newest["reason"] is None
    assert listed["requests"] == []
    status, _, raw = server.request("GET", "/v1/jobs/job_nope/controls")
    assert status == 404, raw
    status, _, raw = server.request("GET", "/metrics")
    assert status == 200
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in raw.decode().splitlines()
        if line.startswith("foldline_controls{")
    }
    assert set(samples) == {
        f'foldline_controls{{state="{s}"}}' for s in ("pending", "delivered", "lost")
    }
    assert samples['foldline_controls{state="delivered"}'] >= 2
    assert "# HELP foldline_controls Controls sent into runs, by what became of them." in (
        raw.decode()
    )
    _send(server, job_id, "finalize")
    _result(server, job_id)


def test_channel_effort_schema_is_the_domain_set() -> None:
    assert get_args(get_type_hints(EffortIn)["effort"]) == ch.EFFORTS
