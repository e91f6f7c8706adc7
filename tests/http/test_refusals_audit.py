"""Refusals on the record (issue 44, ADR 0065): through a real server, a spawn past
``max_children``, a control without its grant (ADR 0057) and a stale ``If-Match`` each leave
exactly one ``audit.refused`` in the session's audit stream and change nothing else; a burst
of identical refusals is one event and one ``audit.repeated``; ``foldline history`` and
``verify`` read the stream like any other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import python_agent
from tests.support.cli import foldline
from tests.support.coordination import CALL
from tests.support.front import wait_until
from tests.support.server import Server, serve

pytestmark = [pytest.mark.server, pytest.mark.slow]

# Spawns one sleeper (its one place), a second (refused: max_children), then tries to cancel
# the first (refused: its agent has no cancel grant); says what it saw, and stays live.
PARENT = (
    CALL
    + """
first = call("POST", "/v1/jobs", {"agent": "sleeper", "prompt": "1"})
second = call("POST", "/v1/jobs", {"agent": "sleeper", "prompt": "2"})
child = first[1]["jobs"][0]["job_id"]
cancel = call("POST", "/v1/jobs/" + child + "/cancel", {"reason": "mine"})
print(json.dumps({"child": child, "statuses": [first[0], second[0], cancel[0]]}), flush=True)
time.sleep(120)
"""
)

AGENTS = """
[agents.parent]
command = {parent}
can_spawn = ["sleeper"]
max_children = 1
[agents.sleeper]
command = "cat >/dev/null; sleep 120"
"""


def _json(server: Server, method: str, path: str, body: Any = None, **headers: str) -> Any:
    status, _, raw = server.request(
        method, path, body, {"Content-Type": "application/json", **headers}, timeout=60
    )
    return status, json.loads(raw) if raw else None


def _audit(server: Server, session: str) -> list[dict[str, Any]]:
    status, page = _json(server, "GET", f"/v1/streams/audit:{session}/events")
    return page["events"] if status == 200 else []


def _non_audit_head(server: Server) -> list[tuple[str, int]]:
    """Every stream's head but the audit streams': what a refusal must not move."""
    status, page = _json(server, "GET", "/v1/events?limit=10000")
    assert status == 200
    heads = {e["stream_id"]: e["version"] for e in page["events"]}
    return sorted((k, v) for k, v in heads.items() if not k.startswith(("audit:", "lease:")))


def _settled(server: Server, parent: str) -> bool:
    """The parent's report is recorded and its one child runs."""
    status, page = _json(server, "GET", f"/v1/streams/job:{parent}/events")
    reported = status == 200 and any(
        "statuses" in str(e["event"].get("text", "")) for e in page["events"]
    )
    status, jobs = _json(server, "GET", "/v1/jobs?session=s1")
    return reported and sorted(j["state"] for j in jobs["jobs"]) == ["running", "running"]


def test_refusals_each_leave_one_audit_event_and_nothing_else(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "parent.py").write_text(PARENT)
    agents = tmp_path / "agents.toml"
    agents.write_text(AGENTS.format(parent=json.dumps(python_agent("parent.py"))))
    env = {"FOLDLINE_AGENTS_FILE": str(agents), "FOLDLINE_RUNNER": "cat"}
    with serve(workspace, env, workers=1) as server:  # one process coalesces
        status, body = server.invoke(
            {"prompt": "go", "session": "s1", "agent": "parent", "async": True}
        )
        assert body["status"] == "accepted", (status, body)
        parent = body["invocation"]
        wait_until(lambda: len(_audit(server, "s1")) >= 2, 60, "the run's two refusals")
        # The parent says what it saw after its calls, and its child starts on its own time:
        # both are on record before the heads a later refusal must not move are taken.
        wait_until(lambda: _settled(server, parent), 60, "the parent's report, its child's start")
        status, job = _json(server, "GET", f"/v1/jobs/{parent}")
        before = _non_audit_head(server)
        stale = str(job["control_revision"] + 7)  # ADR 0057: If-Match names it
        status, body = _json(
            server, "POST", f"/v1/jobs/{parent}/pause", {"reason": "x"}, **{"If-Match": stale}
        )
        assert status == 412, body
        wait_until(lambda: len(_audit(server, "s1")) == 3, 30, "the stale revision's record")
        assert _non_audit_head(server) == before  # the refusal moved no other stream
        events = _audit(server, "s1")

        # A burst of one refusal: the first on record, the rest counted in one event.
        for _ in range(6):
            status, body = _json(
                server, "POST", f"/v1/jobs/{parent}/cancel", {"reason": "x"}, **{"If-Match": stale}
            )
            assert status == 412, body
        wait_until(lambda: len(_audit(server, "s1")) == 5, 40, "the burst count")
        burst = _audit(server, "s1")[3:]
        status, jobs = _json(server, "GET", "/v1/jobs?session=s1")
        history = foldline("history", str(workspace / ".foldline" / "foldline.db"), "audit:s1")

    spawn, control, revision = (e["event"] for e in events)
    assert [e["event_type"] for e in events] == ["audit.refused"] * 3
    assert (spawn["action"], spawn["code"], spawn["status"]) == ("spawn", "admission_rejected", 429)
    assert spawn["limits"]["reason"] == "max_children"
    assert (spawn["limits"]["used"], spawn["limits"]["limit"]) == ("1", "1")
    assert (spawn["caller"], spawn["agent"]) == (parent, "sleeper")
    assert (control["action"], control["code"], control["status"]) == (
        "control",
        "not_granted",
        403,
    )
    assert (control["caller"], control["control"]) == (parent, "cancel")
    assert control["route"] == "POST /v1/jobs/{job_id}/{action}"
    assert (revision["code"], revision["status"], revision["caller"]) == (
        "stale_revision",
        412,
        "operator",
    )
    assert (revision["target"], revision["agent"], revision["control"]) == (
        parent,
        "parent",
        "pause",
    )
    # Nothing else changed: one child only, and it was never cancelled.
    assert sorted(j["agent"] for j in jobs["jobs"]) == ["parent", "sleeper"]
    assert all(j["state"] == "running" for j in jobs["jobs"]), jobs
    assert [e["event_type"] for e in burst] == ["audit.refused", "audit.repeated"]
    assert burst[1]["event"]["count"] == 5
    assert history.returncode == 0, history.stderr
    lines = [json.loads(line) for line in history.stdout.splitlines()]
    assert [line["event_type"] for line in lines] == ["audit.refused"] * 4 + ["audit.repeated"]
    assert lines[0]["event"]["limits"]["reason"] == "max_children"
    for line in lines:
        print("EVIDENCE audit:", line["event_type"], json.dumps(line["event"], sort_keys=True))
    verdict = json.loads(foldline("verify", str(workspace / ".foldline" / "foldline.db")).stdout)
    assert verdict["ok"] is True and verdict["violations"] == [], verdict
