"""A root controls its workers (ADR 0057), through a real ``foldline serve`` and runner scripts:
the root's own run token cancels a looping worker it was granted ``cancel`` on (its process
group gone, its sibling untouched) and is refused one of an agent it has no grant for (403
naming the grant, nothing recorded); the control revision only controls move, so an
``If-Match`` read before a burst of output still holds and a stale one is 412; a fork starts
from its source's output (a writer's from its worktree's current change); a live job's result
is its output so far, marked partial; a grant the agents file cannot mean stops the boot."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import python_agent
from tests.support.channel import job_events, of_type, wait_for
from tests.support.cli import boot_refusal
from tests.support.server import Server, serve
from tests.support.writers import repository

pytestmark = [pytest.mark.server, pytest.mark.slow]

# The root says its run token and stays up; a looper says its prompt and what it was given to
# start from (a fork's earlier output), then ticks until it is stopped (at most 200 s).
ROOT = """import os, time
print("TOKEN", os.environ["FOLDLINE_RUN_TOKEN"], flush=True)
time.sleep(120)
"""
LOOPER = """import os, sys, time
print("PROMPT", repr(sys.stdin.read()), flush=True)
seed = os.environ.get("FOLDLINE_EARLIER_OUTPUT")
if seed:
    print("SEED", repr(open(seed).read()), flush=True)
for n in range(1000):
    print("tick", n, flush=True)
    time.sleep(0.2)
"""
AGENTS = """
[agents.root]
command = {root}
can_spawn = ["worker", "other"]
controls = {{ worker = ["cancel", "pause", "continue", "fork", "inspect"] }}
[agents.worker]
command = {looper}
[agents.other]
command = {looper}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("controls")
    workspace = base / "ws"
    workspace.mkdir()
    (workspace / "root.py").write_text(ROOT)
    (workspace / "looper.py").write_text(LOOPER)
    agents = base / "agents.toml"
    agents.write_text(
        AGENTS.format(
            root=json.dumps(python_agent("root.py")), looper=json.dumps(python_agent("looper.py"))
        )
    )
    with serve(workspace, {"FOLDLINE_AGENTS_FILE": str(agents)}) as running:
        yield running


def call(server: Server, method: str, path: str, body: Any = None, **headers: str) -> Any:
    payload = None if body is None else json.dumps(body).encode()
    status, _, raw = server.request(
        method, path, payload, {"Content-Type": "application/json", **headers}
    )
    return status, json.loads(raw) if raw else None


def output(server: Server, job_id: str) -> str:
    return "".join(e["event"]["text"] for e in of_type(job_events(server, job_id), "job.output"))


def wait_output(server: Server, job_id: str, text: str, limit: float = 30) -> str:
    deadline = time.monotonic() + limit
    while text not in (found := output(server, job_id)):
        assert time.monotonic() < deadline, f"{job_id} never printed {text!r}: {found!r}"
        time.sleep(0.1)
    return found


def row(server: Server, job_id: str) -> dict[str, Any]:
    status, body = call(server, "GET", f"/v1/jobs/{job_id}")
    assert status == 200, body
    return dict(body)


def start_root(server: Server) -> tuple[str, dict[str, str]]:
    """A root job on a session of its own (an asynchronous invocation), and its token's header."""
    status, answer = server.invoke({"prompt": "lead", "agent": "root", "async": True})
    assert status in (200, 202), answer
    root = str(answer["invocation"])
    token = wait_output(server, root, "TOKEN ").split("TOKEN ", 1)[1].split()[0]
    return root, {"Authorization": f"Bearer {token}"}


def group_gone(pid: int, limit: float = 30) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def controls_of(server: Server, job_id: str) -> list[str]:
    """What the log holds of ``job_id`` besides its output: the controls and lifecycle."""
    return [e["event_type"] for e in job_events(server, job_id) if e["event_type"] != "job.output"]


def test_root_controls_its_workers_with_its_own_token(server: Server) -> None:
    root, as_root = start_root(server)
    items = [{"agent": "worker", "prompt": "loop"}] * 2 + [{"agent": "other", "prompt": "loop"}]
    status, spawned = call(server, "POST", "/v1/jobs", {"jobs": items}, **as_root)
    assert status == 201, spawned
    looping, sibling, other = (j["job_id"] for j in spawned["jobs"])
    for job_id in (looping, sibling, other):
        wait_output(server, job_id, "tick 1")

    # A root cancels a looping worker with its own token: the process group is gone, the row
    # cancelled, the sibling untouched.
    pid = row(server, looping)["pid"]
    status, body = call(
        server, "POST", f"/v1/jobs/{looping}/cancel", {"reason": "loops"}, **as_root
    )
    assert status == 200 and body["control_revision"] == 1, body
    wait_for(server, looping, "job.cancelled")
    assert group_gone(pid), f"process group {pid} of {looping} is still there"
    assert row(server, looping)["state"] == "cancelled"
    beside = row(server, sibling)
    assert (beside["state"], beside["control_revision"]) == ("running", 0), beside
    os.killpg(beside["pid"], 0)  # its process group lives

    # A worker of an agent it has no grant on: 403 naming the grant, nothing recorded.
    before = controls_of(server, other)
    status, body = call(server, "POST", f"/v1/jobs/{other}/cancel", **as_root)
    assert status == 403 and body["error"]["code"] == "not_granted", body
    assert "no 'cancel' grant on agent 'other'" in body["error"]["message"]
    assert controls_of(server, other) == before and row(server, other)["state"] == "running"
    print("EVIDENCE cancel:", looping, "cancelled, group", pid, "gone; refused:", body)

    # The control revision moves with controls only: read it, let output flow, it holds.
    revision = row(server, sibling)["control_revision"]
    outputs = read_at = len(of_type(job_events(server, sibling), "job.output"))
    wait_for(server, sibling, "job.output", count=outputs + 3)
    match = {"If-Match": str(revision)}
    status, body = call(server, "POST", f"/v1/jobs/{sibling}/pause", **match, **as_root)
    assert status == 200 and body["state"] == "paused", body
    status, body = call(server, "POST", f"/v1/jobs/{sibling}/continue", **match, **as_root)
    assert status == 412 and body["error"]["code"] == "stale_revision", body
    status, body = call(
        server, "POST", f"/v1/jobs/{sibling}/continue", **{"If-Match": str(revision + 1)}, **as_root
    )
    assert status == 200 and body["state"] == "running" and body["control_revision"] == 2, body
    outputs = len(of_type(job_events(server, sibling), "job.output"))
    wait_for(server, sibling, "job.output", count=outputs + 3)
    before = controls_of(server, sibling)
    status, stale = call(server, "POST", f"/v1/jobs/{sibling}/pause", **match, **as_root)
    assert status == 412 and stale["error"]["code"] == "stale_revision", stale
    assert controls_of(server, sibling) == before and row(server, sibling)["state"] == "running"
    status, body = call(server, "POST", f"/v1/jobs/{sibling}/steer", {"text": "x", "turn": "t"})
    assert status == 428 and body["error"]["code"] == "precondition_required", body
    flowed = len(of_type(job_events(server, sibling), "job.output")) - read_at
    print("EVIDENCE stale revision while output flows:", flowed, "outputs since read;", stale)

    # A live job's result: its output so far, partial, paged; nobody's read is recorded.
    status, partial = call(server, "GET", f"/v1/jobs/{sibling}/result", **as_root)
    assert status == 200 and partial["partial"] is True, partial
    assert partial["result_state"] is None and "tick 1\n" in partial["text"], partial
    status, page = call(server, "GET", f"/v1/jobs/{sibling}/result?cursor=5", **as_root)
    assert status == 200 and partial["text"][5:] in page["text"], page
    status, body = call(server, "GET", f"/v1/jobs/{other}/result", **as_root)
    assert status == 403 and body["error"]["code"] == "not_granted", body
    status, _ = call(server, "GET", f"/v1/streams/result:{sibling}/events")
    assert status == 404  # no read is on record: the first read of a final result still is
    print("EVIDENCE partial:", {**partial, "text": partial["text"][:60]})

    # A fork starts from its source's prompt and output so far, below the root.
    revision = row(server, sibling)["control_revision"]
    status, fork = call(
        server,
        "POST",
        f"/v1/jobs/{sibling}/fork",
        {"input": "and go on"},
        **{"If-Match": str(revision)},
        **as_root,
    )
    assert status == 200, fork
    assert (fork["forked_from"], fork["parent_job"], fork["agent"]) == (sibling, root, "worker")
    assert row(server, sibling)["control_revision"] == revision + 1
    seeded = wait_output(server, fork["job_id"], "tick 0")
    assert "PROMPT 'loop\\n\\nand go on'" in seeded, seeded
    seed = seeded.split("SEED ", 1)[1].splitlines()[0]
    assert "tick 0\\n" in seed and "PROMPT" in seed, seeded
    status, body = call(server, "POST", f"/v1/jobs/{other}/fork", **as_root)
    assert status == 403 and body["error"]["code"] == "not_granted", body
    print("EVIDENCE fork:", fork["job_id"], "forked_from", sibling, "starts", seeded[:200])

    status, body = call(server, "POST", f"/v1/jobs/{root}/cancel")  # the operator: all of it
    assert status == 200, body
    for job_id in (sibling, other, fork["job_id"], root):
        wait_for(server, job_id, "job.cancelled")


def test_root_controls_refuse_a_run_of_another_lineage(server: Server) -> None:
    root, as_root = start_root(server)
    session = row(server, root)["session_id"]
    status, spawned = call(
        server, "POST", "/v1/jobs", {"session": session, "prompt": "loop", "agent": "worker"}
    )
    assert status == 201, spawned
    stray = spawned["jobs"][0]["job_id"]  # the operator's: no descendant of the root
    status, body = call(server, "POST", f"/v1/jobs/{stray}/cancel", **as_root)
    assert status == 403 and body["error"]["code"] == "forbidden", body
    assert "not an ancestor" in body["error"]["message"]
    status, body = call(server, "GET", f"/v1/jobs/{stray}/result", **as_root)
    assert status == 403 and body["error"]["code"] == "forbidden", body
    for job_id in (stray, root):
        call(server, "POST", f"/v1/jobs/{job_id}/cancel")
        wait_for(server, job_id, "job.cancelled")


WRITER = """import os, pathlib, sys, time
sys.stdin.read()
notes = pathlib.Path("notes.txt")
if os.environ.get("FOLDLINE_EARLIER_OUTPUT"):
    print("FORK SEES", repr(notes.read_text() if notes.exists() else None), flush=True)
else:
    notes.write_text("from the source\\n")
    print("wrote", flush=True)
time.sleep(60)
"""
WRITERS = """
[agents.root]
command = {root}
can_spawn = ["writer"]
controls = {{ writer = ["pause", "fork", "cancel"] }}
[agents.writer]
command = {writer}
mode = "workspace-write"
"""


def test_root_forks_a_writer_from_its_worktrees_current_change(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    scripts = {"root.py": ROOT, "writer.py": WRITER}
    repository(workspace, scripts)
    agents = tmp_path / "agents.toml"
    commands = {
        name: json.dumps(python_agent(str(workspace / f"{name}.py"))) for name in ("root", "writer")
    }
    agents.write_text(WRITERS.format(**commands))
    with serve(workspace, {"FOLDLINE_AGENTS_FILE": str(agents)}) as server:
        root, as_root = start_root(server)
        body = {"agent": "writer", "prompt": "write", "write_scope": ["notes.txt"]}
        status, spawned = call(server, "POST", "/v1/jobs", body, **as_root)
        assert status == 201, spawned
        source = spawned["jobs"][0]["job_id"]
        wait_output(server, source, "wrote")
        # A writer's scope is its own while its run lives, a live pause's too (ADR 0058): its
        # fork waits until a cold pause has retired its run.
        status, refused = call(server, "POST", f"/v1/jobs/{source}/fork", **as_root)
        assert status == 429 and refused["error"]["reason"] == "write_scope_conflict", refused
        status, paused = call(server, "POST", f"/v1/jobs/{source}/pause", **as_root)
        assert status == 200 and paused["state"] == "paused", paused
        status, refused = call(server, "POST", f"/v1/jobs/{source}/fork", **as_root)
        assert status == 429 and refused["error"]["reason"] == "write_scope_conflict", refused
        cold = {"mode": "cold", "grace": 5}
        status, paused = call(server, "POST", f"/v1/jobs/{source}/pause", cold, **as_root)
        assert status == 200 and paused["pause"] in ("cold", "retired"), paused
        wait_for(server, source, "job.retired")
        status, fork = call(server, "POST", f"/v1/jobs/{source}/fork", **as_root)
        assert status == 200 and fork["forked_from"] == source, fork
        seen = wait_output(server, fork["job_id"], "FORK SEES")
        assert "FORK SEES 'from the source\\n'" in seen, seen
        assert (workspace / "notes.txt").exists() is False  # the workspace is untouched
        print("EVIDENCE writer fork:", fork["job_id"], seen.strip())
        status, body = call(server, "POST", f"/v1/jobs/{root}/cancel")
        assert status == 200, body
        for job_id in (source, fork["job_id"], root):
            wait_for(server, job_id, "job.cancelled")


def test_root_controls_an_unknown_grant_is_a_one_line_boot_error(tmp_path: Path) -> None:
    bad = tmp_path / "agents.toml"
    bad.write_text('[agents.r]\ncommand = "x"\ncontrols = { r = ["kill"] }\n')
    assert "unknown control 'kill'" in boot_refusal(tmp_path / "ws", "FOLDLINE_AGENTS_FILE", bad)
    bad.write_text('[agents.r]\ncommand = "x"\ncontrols = { ghost = ["cancel"] }\n')
    assert "unknown agent 'ghost'" in boot_refusal(tmp_path / "ws", "FOLDLINE_AGENTS_FILE", bad)
