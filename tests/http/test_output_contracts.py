"""Output contracts (issue 44, ADR 0065): warn and strict agents answer valid, invalid and
non-JSON replies through a real server, over ``/invocations`` and the official A2A client;
``verify`` agrees with what was recorded. The agents run ``cat``: the reply is the prompt (the
streamed one once the test opens its gate, ``tests.support.a2a.gated``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict

from tests.support.a2a import gated
from tests.support.cli import boot_refusal, foldline
from tests.support.server import Server, serve

pytestmark = [pytest.mark.server, pytest.mark.slow]

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
}
AGENTS = """
[agents.warner]
command = "cat"
output_schema = "answer.schema.json"
[agents.strict]
command = "cat"
output_schema = { type = "object", required = ["answer"], properties = { answer = { type = "integer" } } }
contract = "strict"
[agents.streamer]
command = "for _ in $(seq 600); do [ -e gate ] && break; sleep 0.1; done; cat"
output_schema = "answer.schema.json"
contract = "strict"
"""  # noqa: E501 - one TOML inline table
VALID, INVALID, NOT_JSON = '{"answer": 42}', '{"answer": "many"}', "forty-two"


def _invoke(server: Server, agent: str, prompt: str, session: str) -> dict[str, Any]:
    body = {"prompt": prompt, "session": session, "agent": agent}
    status, _, raw = server.request(
        "POST", "/invocations", body, {"Content-Type": "application/json"}, timeout=90
    )
    assert status == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    return answer


def _result(server: Server, job_id: str) -> dict[str, Any]:
    status, _, raw = server.request("GET", f"/v1/jobs/{job_id}/result")
    assert status == 200, raw
    found: dict[str, Any] = json.loads(raw)
    return found


def _send(message_id: str, text: str, agent: str) -> SendMessageRequest:
    said = Message(
        message_id=message_id,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        metadata={"agent": agent},
    )
    return SendMessageRequest(message=said)


async def _a2a(url: str, workspace: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    client = await create_client(url, client_config=ClientConfig(streaming=False))
    for name, text in (("valid", VALID), ("invalid", INVALID), ("not json", NOT_JSON)):
        async for response in client.send_message(_send(f"m-{name}", text, "strict")):
            seen[name] = response.task
    streaming = await create_client(url)
    streamed = streaming.send_message(_send("m-s", VALID, "streamer"))
    seen["stream"] = await gated(streamed, workspace / "gate")
    for each in (client, streaming):
        await each.close()
    return seen


def _setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "answer.schema.json").write_text(json.dumps(SCHEMA))
    agents = tmp_path / "agents.toml"
    agents.write_text(AGENTS)
    return workspace, {"FOLDLINE_AGENTS_FILE": str(agents), "FOLDLINE_RUNNER": "cat"}


def test_contracts_warn_and_strict_over_invocations_and_a2a(tmp_path: Path) -> None:
    workspace, env = _setup(tmp_path)
    with serve(workspace, env, workers=2) as server:
        answers = {
            (agent, name): _invoke(server, agent, text, f"{agent}-{n}")
            for agent in ("warner", "strict")
            for n, (name, text) in enumerate(
                (("valid", VALID), ("invalid", INVALID), ("not json", NOT_JSON))
            )
        }
        results = {key: _result(server, answer["invocation"]) for key, answer in answers.items()}
        seen = asyncio.run(_a2a(f"http://127.0.0.1:{server.port}", workspace))

    # A warn contract records the verdict and lets every reply through.
    for name in ("valid", "invalid", "not json"):
        assert answers["warner", name]["status"] == "ok", answers["warner", name]
    valid = results["warner", "valid"]
    assert (valid["contract_valid"], valid["json"]) == (True, {"answer": 42}), valid
    assert valid["text"].strip() == VALID and valid["contract_errors"] == []
    invalid = results["warner", "invalid"]
    assert invalid["contract_valid"] is False and invalid["json"] is None
    assert invalid["contract_errors"] == ["$.answer: 'many' is not of type 'integer'"]
    not_json = results["warner", "not json"]
    assert not_json["contract_valid"] is False
    assert not_json["contract_errors"][0].startswith("the reply is not JSON"), not_json

    # A strict one fails the job on an invalid reply, with the errors.
    assert answers["strict", "valid"]["status"] == "ok"
    assert results["strict", "valid"]["json"] == {"answer": 42}
    for name in ("invalid", "not json"):
        failed = answers["strict", name]
        assert failed["status"] == "error", failed
        assert "breaks its output contract" in failed["result"], failed
        assert results["strict", name]["contract_valid"] is False
        print("EVIDENCE strict contract fails the job:", failed["status"], failed["result"])
        print("EVIDENCE its result:", json.dumps(results["strict", name]["contract_errors"]))

    # Over A2A: a valid reply's artifact carries a data part; an invalid one fails the task.
    done = seen["valid"]
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    parts = done.artifacts[-1].parts
    assert parts[0].text.strip() == VALID
    assert MessageToDict(parts[1].data) == {"answer": 42}
    for name in ("invalid", "not json"):
        assert seen[name].status.state == TaskState.TASK_STATE_FAILED, seen[name]
        said = seen[name].status.message.parts[0].text
        assert "breaks its output contract" in said, said
    updates = [u.artifact_update for u in seen["stream"] if u.HasField("artifact_update")]
    assert MessageToDict(updates[-1].artifact.parts[-1].data) == {"answer": 42}

    # The verdicts are in the finish events: a rebuild folds them to the same rows.
    verdict = json.loads(foldline("verify", str(workspace / ".foldline" / "foldline.db")).stdout)
    assert verdict["ok"] is True and verdict["violations"] == [], verdict


def test_contracts_an_invalid_schema_is_a_one_line_boot_error(tmp_path: Path) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text('[agents.bad]\ncommand = "cat"\noutput_schema = { type = "objekt" }\n')
    line = boot_refusal(tmp_path / "ws", "FOLDLINE_AGENTS_FILE", agents)
    assert "agents.bad.output_schema: not a valid JSON Schema" in line, line
    agents.write_text('[agents.bad]\ncommand = "cat"\noutput_schema = "missing.json"\n')
    line = boot_refusal(tmp_path / "ws", "FOLDLINE_AGENTS_FILE", agents)
    assert "agents.bad.output_schema" in line and "cannot be read" in line, line
