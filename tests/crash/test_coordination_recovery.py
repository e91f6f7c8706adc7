"""kill -9 of a whole server while a root's batch of workers runs: the next server resumes the
root only; its workers wait suspended until the resumed root continues them with its own run
token (ADR 0058); the batch stays whole, and the resumed root judges each result once."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from engine import open_log
from engine.domain import MACHINES
from projections import default_projections
from tests.crash.test_server_recovery import ENV, kill_everything
from tests.support.agents import python_agent, workspace_with_agents
from tests.support.coordination import CALL
from tests.support.server import Server, serve

pytestmark = [pytest.mark.crash, pytest.mark.server]

# A resumed root does not spawn again: it finds its children by lineage (?parent=), sees them
# suspended, and continues each (ADR 0058), granted continue by its agents file (ADR 0057).
BATCHER = (
    CALL
    + """
me = os.environ["FOLDLINE_JOB_ID"]
if os.environ["FOLDLINE_RESUMED"] == "1":
    children = call("GET", "/v1/jobs?parent=" + me)[1]["jobs"]
    ids = [job["job_id"] for job in children]
    print("saw", " ".join(sorted(job["state"] for job in children)))
    for job_id in ids:
        status, row = call("POST", "/v1/jobs/" + job_id + "/continue")
        print("continue", status, row.get("state"))
else:
    status, body = call("POST", "/v1/jobs", {"jobs": [
        {"agent": "worker", "prompt": str(n)} for n in range(3)]})
    ids = [job["job_id"] for job in body["jobs"]]
for job in wait_all(ids):
    call("GET", "/v1/jobs/" + job["job_id"] + "/result")
    status, row = call("POST", "/v1/jobs/" + job["job_id"] + "/result/accept", {"reason": "ok"})
    print(status, row["result_state"], job["result"].strip())
"""
)
WORKER = 'read -r p; sleep 6; echo "done $p resumed=$FOLDLINE_RESUMED"'


def _children(server: Server, root: str) -> list[dict[str, Any]]:
    status, _, raw = server.request("GET", f"/v1/jobs?parent={root}")
    assert status == 200
    return json.loads(raw)["jobs"]  # type: ignore[no-any-return]


def test_kill_9_while_a_batch_runs_then_recovery_finishes_it_whole(tmp_path: Path) -> None:
    workspace, agents = workspace_with_agents(
        tmp_path,
        {"batcher.py": BATCHER},
        {"root": python_agent("batcher.py"), "worker": WORKER},
        can_spawn={"root": ["worker"]},
        controls={"root": {"worker": ["continue"]}},  # the grant its continues need (ADR 0057)
    )
    env = {**ENV, "FOLDLINE_AGENTS_FILE": str(agents)}
    with serve(workspace, env, workers=2) as first:
        _, receipt = first.invoke({"prompt": "go", "agent": "root", "id": "k1", "async": True})
        root = receipt["invocation"]
        deadline = time.monotonic() + 30
        while len(_children(first, root)) < 3:  # the batch commits whole or not at all
            assert time.monotonic() < deadline, "the batch was never admitted"
            first.request("GET", f"/v1/jobs/wait?ids={root}&timeout=1")
        with serve(workspace, env) as second:
            # A write attempt makes the second server contend for the lease (it is busy now).
            assert second.request("POST", "/invocations", {"prompt": "mine?"})[0] == 503
            kill_everything(first)
            deadline = time.monotonic() + 60
            while (body := second.invoke({"get": "k1"})[1])["status"] != "ok":
                assert body["status"] == "running", body
                assert time.monotonic() < deadline, f"the root never finished: {body}"
                second.request("GET", f"/v1/jobs/wait?ids={root}&timeout=2")
            children = _children(second, root)
            assert len(children) == 3 and len({c["batch"] for c in children}) == 1
            assert all(c["state"] == "ok" and c["result_state"] == "accepted" for c in children)
            assert all(c["result"].endswith("resumed=1\n") for c in children), children
            lines = body["result"].splitlines()
            # The resumed root saw its workers waiting, and its own token continued them.
            assert "saw suspended suspended suspended" in lines, lines
            assert lines.count("continue 200 running") == 3, lines
            assert sorted(line for line in lines if line.startswith("200 ")) == [
                f"200 accepted done {n} resumed=1" for n in range(3)
            ]
            print("EVIDENCE crash: the resumed root said", json.dumps(lines, indent=1))
    log = open_log(workspace / ".foldline" / "foldline.db", MACHINES, default_projections())
    assert log.verify_chain() == []
    assert log.content_hash() == log.rebuild()
    log.close()


# The spawned worker: its first run blocks until the kill; a resumed run says so and ends.
SLOW_WORKER = (
    'read -r p; if [ "$FOLDLINE_RESUMED" = 1 ]; then echo "done $p resumed=1"; '
    "else echo started; sleep 120; fi"
)
SPAWNER = (
    CALL
    + """
status, body = call("POST", "/v1/jobs", {"agent": "worker", "prompt": "w"})
print(status, body["job_id"])
"""
)


def test_kill_9_while_a_spawned_worker_is_paused_then_continue_relaunches_it(
    tmp_path: Path,
) -> None:
    """Goal 7, "relaunch of a suspended worker": a worker spawned by a root through ``/v1/jobs``
    is paused, the server is killed, the next server records the worker ``job.suspended`` (its
    process is gone), and the operator's continue gives it one new, resumed run that ends ok."""
    workspace, agents = workspace_with_agents(
        tmp_path,
        {"spawner.py": SPAWNER},
        {"root": python_agent("spawner.py"), "worker": SLOW_WORKER},
        can_spawn={"root": ["worker"]},
    )
    env = {**ENV, "FOLDLINE_AGENTS_FILE": str(agents)}
    db = workspace / ".foldline" / "foldline.db"
    with serve(workspace, env, workers=2) as first:
        _, receipt = first.invoke({"prompt": "go", "agent": "root", "id": "s1", "async": True})
        root = receipt["invocation"]
        deadline = time.monotonic() + 30
        while not (children := _children(first, root)) or children[0]["state"] != "running":
            assert time.monotonic() < deadline, f"the worker never ran: {children}"
            first.request("GET", f"/v1/jobs/wait?ids={root}&timeout=1")
        (child,) = children
        worker = child["job_id"]
        assert child["parent_job"] == root, child
        # Its first words recorded before the pause: the relaunch carries them (ADR 0058).
        while "started" not in _said(first, worker):
            assert time.monotonic() < deadline, f"the worker never said it started: {child}"
            first.request("GET", f"/v1/jobs/wait?ids={worker}&timeout=1")
        status, _, raw = first.request("POST", f"/v1/jobs/{worker}/pause")
        assert status == 200 and json.loads(raw)["state"] == "paused", raw
        query = "SELECT pid FROM runs WHERE entity_id = ?"
        ((orphan,),) = apsw.Connection(str(db)).execute(query, (worker,)).fetchall()
        kill_everything(first)  # the paused worker's group outlives its server
    with serve(workspace, env, workers=2) as second:
        # /v1 reads take no lease: a get on /invocations is what wakes the takeover, and its
        # recovery records the worker suspended (the worker's process died with the server).
        deadline = time.monotonic() + 30
        while (state := _job(second, worker)["state"]) != "suspended":
            assert state == "paused", state
            assert time.monotonic() < deadline, "the worker was never recorded suspended"
            assert second.invoke({"get": "s1"})[0] == 200
            second.request("GET", f"/v1/jobs/wait?ids={worker}&timeout=1")
        with pytest.raises(ProcessLookupError):  # killed as an orphan, whole group
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                os.killpg(orphan, 0)
                time.sleep(0.05)
        status, _, raw = second.request("POST", f"/v1/jobs/{worker}/continue")
        assert status == 200 and json.loads(raw)["state"] == "running", raw
        deadline = time.monotonic() + 30
        while not (job := _job(second, worker))["finished_at"]:
            assert time.monotonic() < deadline, f"the continued worker never finished: {job}"
            second.request("GET", f"/v1/jobs/wait?ids={worker}&timeout=2")
        assert job["state"] == "ok" and job["result"] == "started\ndone w resumed=1\n", job
    log = open_log(db, MACHINES, default_projections())
    assert log.verify_chain() == []
    assert log.content_hash() == log.rebuild()
    log.close()
    rows = apsw.Connection(str(db)).execute(
        "SELECT event_type, payload FROM events WHERE stream_id = ? ORDER BY version",
        (f"job:{worker}",),
    )
    events = [(kind, json.loads(payload)) for kind, payload in rows]
    kinds = [kind for kind, _ in events if kind != "job.output"]
    assert kinds[:3] == ["job.accepted", "job.started", "job.paused"], kinds
    assert events[0][1]["parent_job"] == root, events[0]
    assert kinds.count("job.suspended") == 1 and kinds.count("job.started") == 2, kinds
    assert kinds.index("job.suspended") < len(kinds) - 1 - kinds[::-1].index("job.started")
    assert kinds.count("job.finished") == 1 and kinds[-1] == "job.finished", kinds


def _said(server: Server, job_id: str) -> str:
    """What the job's recorded output says so far."""
    status, _, raw = server.request("GET", f"/v1/streams/job:{job_id}/events")
    assert status == 200, raw
    return "".join(e["event"].get("text", "") for e in json.loads(raw)["events"])


def _job(server: Server, job_id: str) -> dict[str, Any]:
    status, _, raw = server.request("GET", f"/v1/jobs/{job_id}")
    assert status == 200, raw
    return json.loads(raw)  # type: ignore[no-any-return]
