"""A session's history reaches each run of its root jobs (ADR 0049), on a real server: a file
named by ``FOLDLINE_SESSION_HISTORY``, outside the workspace, gone when the run ends."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import python_agent, workspace_with_agents
from tests.support.coordination import CALL
from tests.support.postgres import session_cluster
from tests.support.server import Server, serve

pytestmark = [pytest.mark.server]

# Keeps what it saw under seen/<job id>.jsonl (the test reads it after the file is gone),
# answers with how much it saw and where the file was.
HISTORIAN = """
import os, sys, time
prompt = sys.stdin.read().strip()
path = os.environ.get("FOLDLINE_SESSION_HISTORY", "")
seen = open(path).read() if path else ""
if prompt.startswith("slow"):
    print("working", flush=True)
    time.sleep(60)
os.makedirs("seen", exist_ok=True)
with open(os.path.join("seen", os.environ["FOLDLINE_JOB_ID"] + ".jsonl"), "w") as out:
    out.write(seen)
print(f"reply to {prompt}: {len(seen.splitlines())} earlier")
print("history at " + path)
"""
# Asked to spawn, spawns one historian as its worker and answers with the worker's result;
# else says what it was told.
PARENT = (
    CALL
    + """
prompt = sys.stdin.read().strip()
if prompt != "spawn":
    print("parent heard", prompt)
    sys.exit(0)
print("root saw", len(open(os.environ["FOLDLINE_SESSION_HISTORY"]).read().splitlines()))
status, body = call("POST", "/v1/jobs", {"agent": "historian", "prompt": "as a worker"})
print(wait_all([job["job_id"] for job in body["jobs"]])[0]["result"], end="")
"""
)


def _seen(workspace: Path, job_id: str) -> list[dict[str, Any]]:
    text = (workspace / "seen" / f"{job_id}.jsonl").read_text()
    print(text, end="")  # the closing note quotes the history a run saw
    return [json.loads(line) for line in text.splitlines()]


def _where(result: str) -> str:
    return next(line for line in result.splitlines() if line.startswith("history at "))[11:]


def _historian(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    workspace, agents = workspace_with_agents(
        tmp_path,
        {"historian.py": HISTORIAN, "parent.py": PARENT},
        {"historian": python_agent("historian.py"), "parent": python_agent("parent.py")},
        can_spawn={"parent": ["historian"]},
    )
    env = {"FOLDLINE_RUNNER": python_agent("historian.py"), "FOLDLINE_AGENTS_FILE": str(agents)}
    return workspace, env


def _call(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = server.invoke(body, timeout=60)
    assert status in (200, 202), answer
    return answer  # type: ignore[no-any-return]


@pytest.mark.parametrize("storage", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def test_session_history_reaches_the_third_call_with_the_first_two_prompts_and_replies(
    tmp_path: Path, storage: str
) -> None:
    workspace, env = _historian(tmp_path)
    if storage == "postgres":  # the read of a session's root jobs, on the other backend
        env["FOLDLINE_DB"] = session_cluster().url_for(tmp_path)
    with serve(workspace, env) as server:
        first = _call(server, {"prompt": "my name is Ada", "session": "s1"})
        second = _call(server, {"prompt": "what is my name?", "session": "s1"})
        third = _call(server, {"prompt": "and before that?", "session": "s1"})
        other = _call(server, {"prompt": "elsewhere", "session": "s2"})
    assert [b["status"] for b in (first, second, third, other)] == ["ok"] * 4
    assert first["result"].startswith("reply to my name is Ada: 0 earlier")
    assert second["result"].startswith("reply to what is my name?: 1 earlier")
    seen = _seen(workspace, third["invocation"])
    assert [(e["kind"], e["job_id"], e["state"]) for e in seen] == [
        ("job", first["invocation"], "ok"),
        ("job", second["invocation"], "ok"),
    ]
    assert [(e["prompt"], e["reply"]) for e in seen] == [
        ("my name is Ada", first["result"]),
        ("what is my name?", second["result"]),
    ]
    assert all(e["created_at"] <= e["started_at"] <= e["finished_at"] for e in seen)
    assert _seen(workspace, other["invocation"]) == []  # another session's history is its own
    for body in (first, third):  # a file of the run's own, outside the workspace, gone after
        where = Path(_where(body["result"]))
        assert where.is_absolute() and not where.is_relative_to(workspace)
        assert not where.exists() and not where.parent.exists()


def test_a_superseded_job_is_in_the_history_without_a_reply_and_a_worker_gets_none(
    tmp_path: Path,
) -> None:
    workspace, env = _historian(tmp_path)
    with serve(workspace, env) as server:
        slow = _call(server, {"prompt": "slow work", "session": "s1", "async": True})
        _until_said(server, slow["invocation"], "working")
        after = _call(server, {"prompt": "instead", "session": "s1", "deliver": False})
        # A session keeps its agent (ADR 0048): the parent's own session.
        _call(server, {"prompt": "hello", "session": "s2", "agent": "parent"})
        parent = _call(server, {"prompt": "spawn", "session": "s2"})
    seen = _seen(workspace, after["invocation"])
    assert [(e["job_id"], e["state"], e["prompt"], e["reply"]) for e in seen] == [
        (slow["invocation"], "superseded", "slow work", None),
    ]
    assert parent["status"] == "ok", parent["result"]
    assert parent["result"].startswith("root saw 1\n")  # a root: its session's earlier job
    assert "history at \n" in parent["result"]  # its worker: no history


def _until_said(server: Server, job_id: str, text: str) -> None:
    """Until the job's recorded output holds ``text``: each round blocks on the log."""
    for _ in range(60):
        status, _, raw = server.request("GET", f"/v1/streams/job:{job_id}/events")
        assert status == 200
        if any(text in e["event"].get("text", "") for e in json.loads(raw)["events"]):
            return
        server.request("GET", f"/v1/jobs/wait?ids={job_id}&timeout=0.5")
    raise AssertionError(f"{job_id} never said {text!r}")


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory the run user can walk into (pytest's own temporary root is root's 0700)."""
    path = Path(tempfile.mkdtemp(prefix="foldline-history-"))
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs as another user only under a root server")
def test_a_run_as_another_user_reads_its_history_and_cannot_list_its_directory_after(
    base: Path,
) -> None:
    workspace = base / "ws"
    workspace.mkdir()
    runner = 'cat >/dev/null; id -u; h=$FOLDLINE_SESSION_HISTORY; echo "at $h"; cat "$h"'
    env = {"FOLDLINE_RUN_USER": "1000:1000", "FOLDLINE_RUNNER": runner}
    with serve(workspace, env) as server:
        first = _call(server, {"prompt": "one", "session": "s1"})
        second = _call(server, {"prompt": "two", "session": "s1"})
    assert second["status"] == "ok", second
    lines = second["result"].splitlines()
    assert lines[0] == "1000"
    entry = json.loads(lines[2])
    assert (entry["job_id"], entry["prompt"], entry["reply"]) == (
        first["invocation"],
        "one",
        first["result"],
    )
    assert not Path(lines[1][3:]).parent.exists()


def _a2a(server: Server, message: dict[str, Any]) -> dict[str, Any]:
    """A blocking SendMessage: the task, once it is done."""
    body = {"jsonrpc": "2.0", "id": "r", "method": "SendMessage", "params": {"message": message}}
    status, _, raw = server.request("POST", "/", body, timeout=60)
    assert status == 200, raw
    return json.loads(raw)["result"]["task"]  # type: ignore[no-any-return]


def test_an_a2a_tasks_run_gets_its_contexts_history_besides_its_messages(
    tmp_path: Path,
) -> None:
    workspace, env = _historian(tmp_path)
    with serve(workspace, env) as server:
        first = _a2a(server, {"messageId": "m-1", "parts": [{"text": "hello"}]})
        context = first["contextId"]
        second = _a2a(
            server, {"messageId": "m-2", "contextId": context, "parts": [{"text": "again"}]}
        )
        _, _, raw = server.request("GET", f"/v1/jobs?session={context}")
    assert first["id"] != second["id"]
    jobs = {job["task_id"]: job for job in json.loads(raw)["jobs"]}
    seen = _seen(workspace, jobs[second["id"]]["job_id"])
    assert [(e["job_id"], e["state"], e["prompt"]) for e in seen] == [
        (jobs[first["id"]]["job_id"], "ok", "hello"),
    ]
    assert seen[0]["reply"].startswith("reply to hello: 0 earlier")
