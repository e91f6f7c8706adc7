"""The quiet gate (ADR 0050) through a real gunicorn: an ``/invocations`` job whose run exits with
its workers still running stays ``running`` (state ``settling``) for its sync caller, its
``get`` and its notify hook, and ends with its own reply when the last worker ends, the hook
run once; also after a ``kill -9`` of the server between the root's exit and its workers'
end."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import apsw
import pytest

from tests.crash.test_server_recovery import kill_everything
from tests.http.test_notify_owed import HOOK, _count
from tests.support.agents import python_agent, workspace_with_agents
from tests.support.cli import foldline
from tests.support.coordination import CALL
from tests.support.front import wait_until
from tests.support.server import RECOVERY_ENV, Server, serve

pytestmark = pytest.mark.server

# Spawns two workers through the run's own /v1 API and exits at once, without waiting.
ROOT = (
    CALL
    + """
sys.stdin.read()
status, body = call("POST", "/v1/jobs", {"jobs": [
    {"agent": "worker", "prompt": "a"}, {"agent": "worker", "prompt": "b"}]})
assert status == 201, body
print("root reply")
"""
)
# A worker waits (bounded: 120 s) for its gate file in the workspace, then answers.
WORKER = (
    'read -r p; i=0; while [ ! -e "gate-$p" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done;'
    ' echo "worker $p resumed=$FOLDLINE_RESUMED"'
)


def _workspace(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    workspace, agents = workspace_with_agents(
        tmp_path,
        {"root.py": ROOT},
        {"root": python_agent("root.py"), "worker": WORKER},
        can_spawn={"root": ["worker"]},
    )
    env = {
        "FOLDLINE_AGENTS_FILE": str(agents),
        "FOLDLINE_NOTIFY": HOOK,
        "HOOK_LOG": str(tmp_path / "hook.log"),
    }
    return workspace, env


def _get(server: Server, key: str) -> dict[str, Any]:
    status, body = server.invoke({"get": key})
    assert status == 200, body
    return dict(body)


def _children(server: Server, root: str) -> dict[str, str]:
    """The root's workers: prompt-free, so by the order they were spawned: job id -> state."""
    status, _, raw = server.request("GET", f"/v1/jobs?parent={root}&limit=10")
    assert status == 200, raw
    return {job["job_id"]: job["state"] for job in json.loads(raw)["jobs"]}


def _seen(server: Server, root: str, timeline: list[str]) -> dict[str, Any]:
    """The root's body now, and a line of the timeline: root state, status, waitingOn,
    result, and each worker's state."""
    body = _get(server, root)
    children = _children(server, root)
    timeline.append(
        f"root state={body['state']} status={body['status']}"
        f" waitingOn={body.get('waitingOn')} result={body['result']!r}"
        f" workers={sorted(children.values())}"
    )
    return body


def _root_settling(server: Server, root: str) -> bool:
    return _get(server, root)["state"] == "settling" and len(_children(server, root)) == 2


def _db(workspace: Path) -> apsw.Connection:
    return apsw.Connection(str(workspace / ".foldline" / "foldline.db"))


def _settled_events(workspace: Path, root: str) -> list[str]:
    rows = _db(workspace).execute(
        "SELECT event_type FROM events WHERE stream_id = ? ORDER BY version", (f"job:{root}",)
    )
    return [row[0] for row in rows.fetchall() if row[0] in ("job.finished", "job.settled")]


def test_quiet_gate_root_answers_its_caller_after_its_last_worker(tmp_path: Path) -> None:
    workspace, env = _workspace(tmp_path)
    db = workspace / ".foldline" / "foldline.db"
    timeline: list[str] = []
    answered: list[tuple[int, Any]] = []
    with serve(workspace, env) as server:
        body = {"prompt": "go", "session": "q1", "agent": "root", "id": "quiet-1"}
        caller = threading.Thread(target=lambda: answered.append(server.invoke(body, 180)))
        caller.start()
        wait_until(lambda: server.invoke({"get": "quiet-1"})[0] == 200, 60, "the job recorded")
        root = _get(server, "quiet-1")["invocation"]
        wait_until(lambda: _root_settling(server, root), 60, "the root settling")
        seen = _seen(server, root, timeline)
        assert (seen["status"], seen["waitingOn"], seen["result"]) == ("running", 2, None)
        assert seen["finishedAt"] is None
        assert caller.is_alive() and not answered  # the sync caller still waits

        first, second = list(_children(server, root))
        (workspace / "gate-a").touch()
        wait_until(lambda: "ok" in _children(server, root).values(), 60, "one worker ended")
        seen = _seen(server, root, timeline)
        assert (seen["state"], seen["waitingOn"]) == ("settling", 1)
        assert _count(db, "job.notify_started") == 0  # no hook before the subtree is quiet

        (workspace / "gate-b").touch()
        caller.join(timeout=120)
        assert not caller.is_alive(), "the sync caller was never answered"
        status, done = answered[0]
        seen = _seen(server, root, timeline)
        wait_until(lambda: _count(db, "job.notify_finished") == 1, 60, "the hook ended")

    print("\n".join(["timeline:", *timeline, f"sync answer: {status} {done}"]))
    assert (status, done["status"], done["result"]) == (200, "ok", "root reply\n")
    assert done["invocation"] == root and "waitingOn" not in done
    assert set(_children_states(workspace, root).values()) == {"ok"}
    hooks = (tmp_path / "hook.log").read_text().splitlines()
    print("\n".join(["hook runs:", *hooks]))
    assert hooks == [f"{root} root reply"]
    assert (_count(db, "job.notify_started"), _count(db, "job.notify_finished")) == (1, 1)
    assert _settled_events(workspace, root) == ["job.finished", "job.settled"]
    assert {first, second} == set(_children_states(workspace, root))


def _children_states(workspace: Path, root: str) -> dict[str, str]:
    rows = _db(workspace).execute("SELECT job_id, state FROM jobs WHERE parent_job = ?", (root,))
    return dict(rows.fetchall())


@pytest.mark.slow
@pytest.mark.crash
def test_quiet_gate_kill_9_between_root_exit_and_workers_end_completes_once(
    tmp_path: Path,
) -> None:
    workspace, env = _workspace(tmp_path)
    env = {**RECOVERY_ENV, **env}
    db = workspace / ".foldline" / "foldline.db"
    timeline: list[str] = []
    with serve(workspace, env) as first:
        status, receipt = first.invoke(
            {"prompt": "go", "session": "q1", "agent": "root", "async": True}
        )
        assert status == 200, receipt
        root = receipt["invocation"]
        wait_until(lambda: _root_settling(first, root), 60, "the root settling")
        _seen(first, root, timeline)
        with serve(workspace, env) as second:
            kill_everything(first)  # the server and the workers' process groups
            # The new server takes the lease, finds the workers cut off and resumes them.
            wait_until(
                lambda: (
                    _get(second, root)["state"] == "settling"
                    and sorted(_children(second, root).values()) == ["running", "running"]
                    and _runs(workspace) == 2
                ),
                90,
                "the workers resumed under the new server",
            )
            _seen(second, root, timeline)
            (workspace / "gate-a").touch()
            (workspace / "gate-b").touch()
            wait_until(lambda: _get(second, root)["status"] == "ok", 90, "the root ended")
            done = _seen(second, root, timeline)
            wait_until(lambda: _count(db, "job.notify_finished") == 1, 60, "the hook ended")

    print("\n".join(["timeline:", *timeline]))
    assert (done["state"], done["result"]) == ("ok", "root reply\n")
    workers = _db(workspace).execute("SELECT result FROM jobs WHERE parent_job = ?", (root,))
    assert sorted(row[0] for row in workers.fetchall()) == [
        "worker a resumed=1\n",
        "worker b resumed=1\n",
    ]
    hooks = (tmp_path / "hook.log").read_text().splitlines()
    print("\n".join(["hook runs:", *hooks]))
    assert hooks == [f"{root} root reply"]
    assert (_count(db, "job.notify_started"), _count(db, "job.notify_finished")) == (1, 1)
    assert _settled_events(workspace, root) == ["job.finished", "job.settled"]
    verified = foldline("verify", str(db))  # legal transitions, read models equal a refold
    assert verified.returncode == 0 and json.loads(verified.stdout)["ok"], verified.stdout


def _runs(workspace: Path) -> int:
    """Job runs started under the newest epoch (the resumed workers')."""
    rows = _db(workspace).execute(
        "SELECT count(*) FROM events WHERE event_type = 'job.started'"
        " AND epoch = (SELECT max(epoch) FROM events)"
    )
    return int(rows.fetchall()[0][0])
