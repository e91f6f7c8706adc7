"""Closed by default (issue 24, goal 3), on a real gunicorn: the generated operator token, the
401s without it, a run token kept to its own session, and rotation without a restart."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import python_agent, workspace_with_agents
from tests.support.coordination import CALL
from tests.support.server import ROOT, Server, serve

pytestmark = pytest.mark.server

SLEEPY = "cat >/dev/null; sleep 30"


def _token_file(workspace: Path) -> Path:
    return workspace / ".foldline" / "foldline.db.token"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def _status(server: Server, method: str, path: str, token: str | None, body: Any = None) -> int:
    headers = _bearer(token) if token is not None else {"Content-Type": "application/json"}
    return server.request(method, path, body, headers, authorize=False)[0]


def _job(server: Server, job_id: str, token: str) -> dict[str, Any]:
    status, _, raw = server.request("GET", f"/v1/jobs/{job_id}", headers=_bearer(token))
    assert status == 200, raw
    return json.loads(raw)  # type: ignore[no-any-return]


def test_auth_without_foldline_token_makes_one_at_first_activation_and_guards_v1(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    token_file = _token_file(workspace)
    with serve(workspace, {"FOLDLINE_TOKEN": "", "FOLDLINE_RUNNER": SLEEPY}) as server:
        assert server.process.stdout is not None
        boot = json.loads(server.process.stdout.readline())
        assert boot["operator_token"] == str(token_file)
        assert not (workspace / ".foldline").exists()  # nothing at boot (lazy activation)
        # No token, or a made-up one: 401 for reads and writes, and nothing is activated.
        for token in (None, "guessed"):
            for method, path in (("GET", "/v1/sessions"), ("POST", "/v1/jobs")):
                assert _status(server, method, path, token, {"prompt": "x"}) == 401, path
        status, headers, raw = server.request("GET", "/v1/machines")
        assert (
            status == 401
            and {k.lower(): v for k, v in headers.items()}["www-authenticate"] == "Bearer"
        )
        assert json.loads(raw)["error"]["code"] == "unauthorized"
        assert not token_file.exists()
        # /invocations stays open and is the first activation: the token file appears.
        status, receipt = server.invoke({"prompt": "x", "session": "s1", "async": True})
        assert status == 200, receipt
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        token = token_file.read_text().strip()
        assert len(token) >= 40 and token not in boot.values()
        job = receipt["invocation"]
        # Without the token a cancel is a 401 and changes nothing.
        for given in (None, "guessed"):
            path = f"/v1/jobs/{job}/cancel"
            assert _status(server, "POST", path, given, {"reason": "x"}) == 401
            assert _status(server, "GET", f"/v1/jobs/{job}", given) == 401
            assert _status(server, "GET", "/console/api/overview", given) == 401
        assert _job(server, job, token)["state"] in ("accepted", "starting", "running")
        assert _status(server, "GET", "/v1/sessions", token) == 200
        assert _status(server, "GET", "/console/api/overview", token) == 200
        assert _status(server, "POST", f"/v1/jobs/{job}/cancel", token, {"reason": "x"}) == 200
        assert _job(server, job, token)["state"] in ("cancelling", "cancelled")
        # What the AgentCore and A2A contracts, Prometheus and the page itself need stays open.
        for path in ("/ping", "/openapi.json", "/metrics", "/console/", "/console/app.js"):
            assert _status(server, "GET", path, None) == 200, path
        assert _status(server, "GET", "/.well-known/agent-card.json", None) == 200


SNOOP = (
    CALL
    + """
other_job, other_session = sys.stdin.read().split()
own, session = os.environ["FOLDLINE_JOB_ID"], os.environ["FOLDLINE_SESSION_ID"]
def status(method, path, body=None):
    return call(method, path, body)[0]
print(json.dumps({
    "own job": status("GET", "/v1/jobs/" + own),
    "own jobs": status("GET", "/v1/jobs"),
    "own session": status("GET", "/v1/sessions/" + session),
    "own stream": status("GET", "/v1/streams/job:" + own + "/events"),
    "machines": status("GET", "/v1/machines"),
    "other job": status("GET", "/v1/jobs/" + other_job),
    "other result": status("GET", "/v1/jobs/" + other_job + "/result"),
    "other stream": status("GET", "/v1/streams/job:" + other_job + "/events"),
    "other session stream": status("GET", "/v1/streams/session:" + other_session + "/events"),
    "other session": status("GET", "/v1/sessions/" + other_session),
    "other session's jobs": status("GET", "/v1/jobs?session=" + other_session),
    "wait on other": status("GET", "/v1/jobs/wait?ids=" + other_job + "&timeout=0"),
    "log": status("GET", "/v1/events"),
    "leases": status("GET", "/v1/leases"),
    "console": status("GET", "/console/api/overview"),
    "cancel other": status("POST", "/v1/jobs/" + other_job + "/cancel", {"reason": "x"}),
    "pause own session": status("POST", "/v1/sessions/" + session + "/pause"),
    "sessions listed": [s["session_id"] for s in call("GET", "/v1/sessions")[1]["sessions"]],
}))
"""
)


def test_auth_a_run_token_reads_only_its_own_session(tmp_path: Path) -> None:
    workspace, agents = workspace_with_agents(
        tmp_path, {"snoop.py": SNOOP}, {"snoop": python_agent("snoop.py"), "sleeper": SLEEPY}
    )
    with serve(workspace, {"FOLDLINE_AGENTS_FILE": str(agents)}) as server:
        status, other = server.invoke(
            {"prompt": "x", "agent": "sleeper", "session": "s2", "async": True}
        )
        assert status == 200, other
        status, body = server.invoke(
            {"prompt": f"{other['invocation']} s2", "agent": "snoop", "session": "s1"}, timeout=90
        )
        assert status == 200 and body["state"] == "ok", body
        seen = json.loads(body["result"])
        own = {"own job", "own jobs", "own session", "own stream", "machines"}
        assert {k: v for k, v in seen.items() if k in own} == dict.fromkeys(own, 200)
        assert seen.pop("sessions listed") == ["s1"]
        refused = {k: v for k, v in seen.items() if k not in own}
        assert refused == dict.fromkeys(refused, 403) and len(refused) == 12, seen
        # The operator sees that the refused calls changed nothing.
        row = _job(server, other["invocation"], server.token or "")
        assert row["state"] == "running" and row["result_state"] is None, row
        assert _status(server, "GET", "/v1/sessions/s2", server.token) == 200
        cancel = f"/v1/jobs/{other['invocation']}/cancel"
        assert _status(server, "POST", cancel, server.token, {"reason": "done"}) == 200


def _token_cli(workspace: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOLDLINE_")}
    return subprocess.run(
        [sys.executable, "-m", "adapters.cli", "token", "--workspace", str(workspace), *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_auth_rotation_takes_effect_on_a_running_server_without_a_restart(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    missing = _token_cli(workspace)
    assert missing.returncode == 2 and "first activation" in missing.stderr, missing.stderr
    with serve(workspace, {"FOLDLINE_TOKEN": "", "FOLDLINE_RUNNER": "cat"}, workers=2) as server:
        assert server.invoke({"prompt": "x"})[0] == 200  # the first activation
        shown = _token_cli(workspace)
        assert shown.returncode == 0, shown.stderr
        old = json.loads(shown.stdout)
        assert old == {
            "file": str(_token_file(workspace)),
            "token": _token_file(workspace).read_text().strip(),
        }
        # Each request is a new connection: both workers answer some of them.
        assert {_status(server, "GET", "/v1/sessions", old["token"]) for _ in range(6)} == {200}
        rotated = _token_cli(workspace, "--rotate")
        assert rotated.returncode == 0, rotated.stderr
        new = json.loads(rotated.stdout)
        assert new["file"] == old["file"] and new["token"] != old["token"]
        assert stat.S_IMODE(_token_file(workspace).stat().st_mode) == 0o600
        assert {_status(server, "GET", "/v1/sessions", old["token"]) for _ in range(6)} == {401}
        assert {_status(server, "GET", "/v1/sessions", new["token"]) for _ in range(6)} == {200}
        assert json.loads(_token_cli(workspace).stdout) == new
