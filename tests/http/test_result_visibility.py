"""Descendants-only reads (issue 44, ADR 0065): through a real server, a worker's run token
reads its own job but not a sibling's, unless its agent's ``result_visibility`` is
``session``; its parent reads both, as the judge of its children."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.agents import python_agent
from tests.support.coordination import CALL
from tests.support.server import serve

pytestmark = [pytest.mark.server, pytest.mark.slow]

# Spawns a worker, waits for it, then two peekers that try to read it; prints their findings.
ROOT = (
    CALL
    + """
status, body = call("POST", "/v1/jobs", {"agent": "worker", "prompt": "w"})
worker = body["jobs"][0]["job_id"]
wait_all([worker])
status, body = call("POST", "/v1/jobs", {"jobs": [
    {"agent": "peeker", "prompt": worker}, {"agent": "wide", "prompt": worker}]})
peekers = [job["job_id"] for job in body["jobs"]]
wait_all(peekers)
for job_id in peekers:
    status, body = call("GET", "/v1/jobs/" + job_id + "/result")
    print(body["text"].strip(), flush=True)
print(json.dumps({"root reads worker": call("GET", "/v1/jobs/" + worker + "/result")[0]}))
"""
)

# Reads its sibling (the prompt) every way a run token can, and lists its session's jobs.
PEEKER = (
    CALL
    + """
sibling = sys.stdin.read().strip()
me = os.environ["FOLDLINE_JOB_ID"]
found = {}
for what, path in [("job", "/v1/jobs/" + sibling),
                   ("result", "/v1/jobs/" + sibling + "/result"),
                   ("stream", "/v1/streams/job:" + sibling + "/events"),
                   ("wait", "/v1/jobs/wait?timeout=0&ids=" + sibling),
                   ("own", "/v1/jobs/" + me)]:
    status, body = call("GET", path)
    found[what] = [status, body.get("error", {}).get("message", "")]
status, body = call("GET", "/v1/jobs")
found["listed"] = sorted(job["job_id"] for job in body["jobs"])
found["me"], found["sibling"] = me, sibling
print(json.dumps(found))
"""
)

AGENTS = """
[agents.root]
command = {root}
can_spawn = ["worker", "peeker", "wide"]
[agents.worker]
command = "cat"
[agents.peeker]
command = {peeker}
[agents.wide]
command = {peeker}
result_visibility = "session"
"""


def test_sibling_read_refused_by_default_and_allowed_with_session_visibility(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "root.py").write_text(ROOT)
    (workspace / "peeker.py").write_text(PEEKER)
    agents = tmp_path / "agents.toml"
    agents.write_text(
        AGENTS.format(
            root=json.dumps(python_agent("root.py")), peeker=json.dumps(python_agent("peeker.py"))
        )
    )
    env = {"FOLDLINE_AGENTS_FILE": str(agents), "FOLDLINE_RUNNER": "cat"}
    with serve(workspace, env) as server:
        status, _, raw = server.request(
            "POST",
            "/invocations",
            {"prompt": "go", "session": "s1", "agent": "root"},
            {"Content-Type": "application/json"},
            timeout=120,
        )
        assert status == 200, raw
        answer = json.loads(raw)
        assert answer["status"] == "ok", answer
        lines = [json.loads(line) for line in answer["result"].splitlines() if line]
        narrow, wide, root = lines[0], lines[1], lines[2]

    sibling = narrow["sibling"]
    for what in ("job", "result", "stream", "wait"):
        status, message = narrow[what]
        assert status == 403, (what, narrow)
        assert "result_visibility" in message and sibling in message, message
    assert narrow["own"][0] == 200
    assert narrow["listed"] == [narrow["me"]]  # the list filters to what it may see
    for what in ("job", "result", "stream", "wait", "own"):
        assert wide[what][0] == 200, (what, wide)
    assert sibling in wide["listed"] and narrow["me"] in wide["listed"]
    assert root == {"root reads worker": 200}
    print("EVIDENCE sibling read refused:", narrow["result"][0], narrow["result"][1])
    print("EVIDENCE sibling read with session visibility:", wide["result"][0])
