"""The notify hook runs once per reply an ``/invocations`` caller was owed (design.md §9), through
a real gunicorn: never for the workers a run spawns, nor for the job of an A2A message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
import pytest

from engine.domain.job import TERMINAL
from tests.support.agents import python_agent, workspace_with_agents
from tests.support.coordination import CALL
from tests.support.front import wait_until
from tests.support.server import Server, serve

pytestmark = pytest.mark.server

# Spawns two workers through the run's own /v1 API, waits for both, then answers.
SPAWNER = (
    CALL
    + """
sys.stdin.read()
status, body = call("POST", "/v1/jobs", {"jobs": [
    {"agent": "worker", "prompt": "a"}, {"agent": "worker", "prompt": "b"}]})
assert status == 201, body
jobs = wait_all([job["job_id"] for job in body["jobs"]])
print("two workers ended " + " ".join(sorted(job["state"] for job in jobs)))
"""
)
JSON = {"Content-Type": "application/json"}
# One line per run: the job it notifies for and the reply it got on stdin.
HOOK = 'printf "%s %s\\n" "$FOLDLINE_JOB_ID" "$(cat)" >> "$HOOK_LOG"'


def _count(db: Path, kind: str) -> int:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute("SELECT count(*) FROM events WHERE event_type = ?", (kind,))
        return int(rows.fetchall()[0][0])
    finally:
        conn.close()


def _jobs(server: Server) -> list[dict[str, Any]]:
    status, _, raw = server.request("GET", "/v1/jobs?limit=100")
    assert status == 200, raw
    return list(json.loads(raw)["jobs"])


def _settled(server: Server, db: Path, hooks: int, limit: float = 60) -> list[dict[str, Any]]:
    """The jobs once every one is terminal, ``hooks`` notify hooks have ended, and /ping says
    nothing is in flight (a run's thread holds the busy board through its hook): no hook can
    start after this."""

    def settled() -> bool:
        if not all(job["state"] in TERMINAL for job in _jobs(server)):
            return False
        if _count(db, "job.notify_finished") < hooks:
            return False
        _, _, ping = server.request("GET", "/ping")
        return bool(json.loads(ping)["status"] == "Healthy")

    wait_until(settled, limit, "every job ended, its hooks ended and /ping Healthy")
    return _jobs(server)


def test_notify_runs_once_per_owed_invocation_reply_never_for_workers_or_a2a(
    tmp_path: Path,
) -> None:
    workspace, agents = workspace_with_agents(
        tmp_path,
        {"spawner.py": SPAWNER},
        {"spawner": python_agent("spawner.py"), "worker": 'read -r p; echo "worker $p"'},
        can_spawn={"spawner": ["worker"]},
    )
    hook_log = tmp_path / "hook.log"
    env = {
        "FOLDLINE_AGENTS_FILE": str(agents),
        "FOLDLINE_RUNNER": 'read -r p; echo "reply to $p"',
        "FOLDLINE_NOTIFY": HOOK,
        "HOOK_LOG": str(hook_log),  # the hook has the server's environment; a run has not
    }
    db = workspace / ".foldline" / "foldline.db"
    with serve(workspace, env) as server:
        made: list[tuple[str, str]] = []  # (job id, reply) of each invocation
        for body in (
            {"prompt": "one", "session": "n1"},
            {"prompt": "two", "session": "n2", "agent": "spawner"},
            {"prompt": "three", "session": "n3"},
        ):
            status, done = server.invoke(body, timeout=90)
            assert (status, done["status"]) == (200, "ok"), done
            made.append((done["invocation"], done["result"].rstrip("\n")))
        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "four"}]}
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        status, _, raw = server.request("POST", "/", rpc, timeout=90)
        task = json.loads(raw)["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        jobs = _settled(server, db, hooks=3)

    lines = hook_log.read_text().splitlines()
    print("\n".join(["hook runs:", *lines]))
    assert [reply for _, reply in made] == [
        "reply to one",
        "two workers ended ok ok",
        "reply to three",
    ]
    assert sorted(lines) == sorted(f"{job_id} {reply}" for job_id, reply in made)
    workers = [job for job in jobs if job["parent_job"] == made[1][0]]
    a2a = [job for job in jobs if job["task_id"] == task["id"]]
    assert len(jobs) == 6 and len(workers) == 2 and len(a2a) == 1, jobs
    assert all(job["state"] == "ok" for job in jobs), jobs
    assert (_count(db, "job.notify_started"), _count(db, "job.notify_finished")) == (3, 3)


def test_notify_skips_superseded_cancelled_and_operator_jobs(tmp_path: Path) -> None:
    """A prompt superseded by a newer one on its session, a cancelled invocation and a job the
    operator started on ``/v1/jobs`` owe no ``/invocations`` caller a reply: only the newer
    prompt's job notifies."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    hook_log = tmp_path / "hook.log"
    env = {
        "FOLDLINE_RUNNER": 'read -r p; case "$p" in hold*) sleep 30;; *) echo "reply to $p";; esac',
        "FOLDLINE_NOTIFY": HOOK,
        "HOOK_LOG": str(hook_log),
    }
    db = workspace / ".foldline" / "foldline.db"
    with serve(workspace, env) as server:
        _, first = server.invoke({"prompt": "hold on", "session": "s1", "async": True})
        # Replace-only, so the newer run reads its own prompt alone (ADR 0048).
        _, newer = server.invoke({"prompt": "newer", "session": "s1", "deliver": False})
        assert newer["status"] == "ok", newer
        _, held = server.invoke({"prompt": "hold again", "session": "s2", "async": True})
        cancel = f"/v1/jobs/{held['invocation']}/cancel"
        assert server.request("POST", cancel, {"reason": "not wanted"}, JSON)[0] == 200
        by_operator = {"session": "s1", "prompt": "by hand"}
        status, _, raw = server.request("POST", "/v1/jobs", by_operator, JSON)
        assert status == 201, raw
        by_hand = json.loads(raw)["jobs"][0]["job_id"]
        jobs = _settled(server, db, hooks=1)

    states = {job["job_id"]: job["state"] for job in jobs}
    assert states == {
        first["invocation"]: "superseded",
        newer["invocation"]: "ok",
        held["invocation"]: "cancelled",
        by_hand: "ok",
    }
    assert hook_log.read_text().splitlines() == [f"{newer['invocation']} reply to newer"]
    assert (_count(db, "job.notify_started"), _count(db, "job.notify_finished")) == (1, 1)
