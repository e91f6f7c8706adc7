"""Writers in their own git worktrees, their results as patches, and integrate (issue 28),
through a real ``foldline serve``, real git repositories and real runner scripts."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import Server, serve
from tests.support.writers import agents_file, git, repository, steps

pytestmark = pytest.mark.server
START = {"a/one.txt": "alpha\nbeta\ngamma\n", "b/two.txt": "uno\ndos\ntres\n", "top.txt": "t\n"}


def _setup(tmp_path: Path) -> tuple[Path, dict[str, str], str]:
    workspace = tmp_path / "ws"
    head = repository(workspace, START)
    agents = agents_file(tmp_path, tmp_path / "scripts")
    return workspace, {"FOLDLINE_AGENTS_FILE": str(agents), "FOLDLINE_RUNNER": "cat"}, head


def _root(server: Server, plan: list[dict[str, Any]], session: str = "s1") -> dict[str, Any]:
    status, _, raw = server.request(
        "POST",
        "/invocations",
        {"prompt": json.dumps(plan), "session": session, "agent": "root"},
        {"Content-Type": "application/json"},
        timeout=120,
    )
    body = json.loads(raw)
    assert status == 200 and body["status"] == "ok", body
    return steps(body["result"])


def _get(server: Server, path: str) -> tuple[int, bytes]:
    status, _, raw = server.request("GET", path, None, {}, timeout=30)
    return status, raw


def _events(server: Server, kind: str) -> list[dict[str, Any]]:
    status, raw = _get(server, "/v1/events?limit=10000")
    assert status == 200
    return [e for e in json.loads(raw)["events"] if e["event_type"] == kind]


PAIR = {
    "name": "pair",
    "writers": [
        [["a"], {"write": {"a/one.txt": "alpha\nBETA\ngamma\n", "a/new.txt": "new in a\n"}}],
        [
            ["b"],
            {"write": {"b/two.txt": "uno\ndos\nTRES\n", "b/deep/x.bin": "x\n"}, "commit": True},
        ],
    ],
}
CONFLICT = {
    "name": "conflict",
    "writers": [[["a"], {"write": {"a/one.txt": "alpha\nBeta!\ngamma\n"}}]],
}
OUTSIDE = {
    "name": "outside",
    "writers": [[["b"], {"write": {"b/ok.txt": "fine\n", "top.txt": "mine now\n"}}]],
    "integrate": False,
}


def test_two_writers_integrate_a_conflict_applies_nothing_and_scope_is_kept(
    tmp_path: Path,
) -> None:
    workspace, env, head = _setup(tmp_path)
    with serve(workspace, env, workers=2) as server:
        said = _root(server, [PAIR, CONFLICT, OUTSIDE])
        # Two writers in one batch, each in a worktree of its own at the root's commit.
        pair = said["pair spawned"]
        assert pair["status"] == 201, pair
        jobs = said["pair waited"]["body"]
        assert [j["state"] for j in jobs] == ["ok", "ok"], jobs
        assert [j["patch"]["paths"] for j in jobs] == [
            ["a/new.txt", "a/one.txt"],
            ["b/deep/x.bin", "b/two.txt"],
        ]
        assert {j["patch"]["base_commit"] for j in jobs} == {head}
        # The root's tree was untouched until the integrations ...
        assert said["pair tree before"]["body"] == ""
        for n in range(2):
            step = said[f"pair integrate {n}"]
            assert step["status"] == 200, step
            assert step["body"]["result_state"] == "integrated"
            assert step["body"]["result_sha256"] == jobs[n]["patch"]["sha256"]
        # ... and has both changes after them, in the working tree, nothing committed.
        assert (workspace / "a/one.txt").read_text() == "alpha\nBETA\ngamma\n"
        assert (workspace / "a/new.txt").read_text() == "new in a\n"
        assert (workspace / "b/two.txt").read_text() == "uno\ndos\nTRES\n"
        assert (workspace / "b/deep/x.bin").read_text() == "x\n"
        assert git(workspace, "rev-parse", "HEAD").strip() == head
        after_pair = said["pair tree after"]["body"]
        assert sorted(after_pair.splitlines()) == [
            " M a/one.txt",
            " M b/two.txt",
            "?? a/new.txt",
            "?? b/deep/",
        ]
        # A writer that touched the first one's lines: 409 naming the path, nothing applied.
        conflict = said["conflict integrate 0"]
        assert conflict["status"] == 409, conflict
        assert conflict["body"]["error"]["paths"] == ["a/one.txt"]
        assert said["conflict tree after"]["body"] == after_pair
        assert (workspace / "a/one.txt").read_text() == "alpha\nBETA\ngamma\n"
        # A writer that wrote outside its scope ends error, naming the path.
        outside = said["outside waited"]["body"][0]
        assert outside["state"] == "error", outside
        assert "changed outside write_scope: top.txt" in outside["result"]
        assert (workspace / "top.txt").read_text() == "t\n"

        # Integrating twice is refused, and changes nothing.
        status, _, raw = server.request(
            "POST", f"/v1/jobs/{jobs[0]['job_id']}/result/integrate", None, {}, timeout=30
        )
        assert status == 409, raw
        assert (workspace / "a/one.txt").read_text() == "alpha\nBETA\ngamma\n"
        # The patch as kept, served; the events that recorded the integrations.
        status, patch = _get(server, f"/v1/jobs/{jobs[0]['job_id']}/patch")
        assert status == 200 and hashlib.sha256(patch).hexdigest() == jobs[0]["patch"]["sha256"]
        assert b"+BETA" in patch
        assert len(_events(server, "result.integrating")) == 2
        integrated = _events(server, "result.integrated")
        assert [e["event"]["paths"] for e in integrated] == [
            ["a/new.txt", "a/one.txt"],
            ["b/deep/x.bin", "b/two.txt"],
        ]
        started = _events(server, "job.started")
        worktrees = [e["event"]["worktree"] for e in started if e["event"]["worktree"]]
        assert len(worktrees) == 4
        assert all(not Path(w).is_relative_to(workspace) for w in worktrees)
        _gone([Path(w) for w in worktrees])  # every job is over
    # No worktree and no branch of foldline's is left.
    assert git(workspace, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(workspace, "branch", "--list", "foldline/*") == ""


def test_a_writer_in_a_workspace_that_is_not_git_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    agents = agents_file(tmp_path, tmp_path / "scripts")
    env = {"FOLDLINE_AGENTS_FILE": str(agents), "FOLDLINE_RUNNER": "cat"}
    with serve(workspace, env) as server:
        said = _root(server, [{"name": "nogit", "writers": [[["a"], {"write": {"a/x": "x"}}]]}])
        refused = said["nogit spawned"]
        assert refused["status"] == 429, refused
        assert refused["body"]["error"]["reason"] == "writable_target_not_git"
        assert len(_events(server, "job.accepted")) == 1  # the root's own job only
    assert not (workspace / ".git").exists()


def _spawn(server: Server, session: str, order: dict[str, Any], scope: str) -> dict[str, Any]:
    body = {"session": session, "agent": "writer", "prompt": json.dumps(order)}
    status, _, raw = server.request(
        "POST", "/v1/jobs", {**body, "write_scope": [scope]}, {"Content-Type": "application/json"}
    )
    assert status == 201, raw
    return json.loads(raw)["jobs"][0]  # type: ignore[no-any-return]


def _until(server: Server, job_id: str, states: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        status, raw = _get(server, f"/v1/jobs/{job_id}")
        row = json.loads(raw)
        if status == 200 and row["state"] in states:
            return row  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, row
        time.sleep(0.05)


def _gone(paths: list[Path]) -> None:
    """Wait (bounded) until none of ``paths`` exists: a job's end is recorded first, then
    its run's thread removes the worktree."""
    deadline = time.monotonic() + 30
    while any(p.exists() for p in paths):
        assert time.monotonic() < deadline, [p for p in paths if p.exists()]
        time.sleep(0.05)


def _worktree_of(server: Server, job_id: str) -> Path:
    started = [e for e in _events(server, "job.started") if e["stream_id"] == f"job:{job_id}"]
    return Path(started[0]["event"]["worktree"])


def test_a_cancelled_writer_and_a_stopped_session_leave_no_worktree_but_keep_patches(
    tmp_path: Path,
) -> None:
    workspace, env, _ = _setup(tmp_path)
    hold = {"write": {"a/x.txt": "x\n"}, "hold": True}
    with serve(workspace, env) as server:
        for session in ("s1", "s2"):
            server.invoke({"prompt": "hello", "session": session})
        cancelled = _spawn(server, "s1", hold, "a")["job_id"]
        done = _spawn(server, "s2", {"write": {"b/y.txt": "y\n"}}, "b")["job_id"]
        held = _spawn(server, "s2", {**hold, "write": {"c/z.txt": "z\n"}}, "c")["job_id"]
        _until(server, done, {"ok"})
        _until(server, held, {"running"})
        worktrees = {job: _worktree_of(server, job) for job in (cancelled, done, held)}
        _gone([worktrees[done]])  # over once its patch was kept
        assert worktrees[cancelled].is_dir() and worktrees[held].is_dir()
        status, _, _ = server.request("POST", f"/v1/jobs/{cancelled}/cancel", None, {})
        assert status == 200
        assert _until(server, cancelled, {"cancelled"})["patch"] is None
        status, _, raw = server.request("POST", "/v1/sessions/s2/stop", None, {}, timeout=60)
        assert status == 200, raw
        assert _until(server, held, {"cancelled", "error"})["state"] in ("cancelled", "error")
        _gone(list(worktrees.values()))
        assert _get(server, f"/v1/jobs/{done}/patch")[0] == 200  # kept patches stay
    assert git(workspace, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(workspace, "branch", "--list", "foldline/*") == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="runs as another user need a root server")
@pytest.mark.parametrize("isolation", ["namespace", "auto"])
def test_writers_run_and_integrate_as_the_run_user(isolation: str) -> None:
    """The default of a root server: runs, and every git command on the workspace, as the run
    user, hooks off; the server itself never runs git there as root."""
    base = Path(tempfile.mkdtemp(prefix="foldline-writers-"))
    os.chmod(base, 0o711)  # the run user walks through to the workspace and its home
    try:
        workspace = base / "ws"
        repository(workspace, START)
        # A hook the repository carries: git run as root by the server would run it as root.
        hook = workspace / ".git" / "hooks" / "post-checkout"
        hook.write_text(f"#!/bin/sh\nid -u > {base}/hook-ran\n")
        hook.chmod(0o755)
        agents = agents_file(base, base / "scripts", python="python3")
        env = {
            "FOLDLINE_AGENTS_FILE": str(agents),
            "FOLDLINE_RUNNER": "cat",
            "FOLDLINE_RUN_USER": "1000:1000",
            "FOLDLINE_RUN_ISOLATION": isolation,
        }
        with serve(workspace, env) as server:
            said = _root(server, [PAIR])
            jobs = said["pair waited"]["body"]
            assert [j["state"] for j in jobs] == ["ok", "ok"], jobs
            assert all(said[f"pair integrate {n}"]["status"] == 200 for n in range(2)), said
            worktree = Path(_worktree_of(server, jobs[0]["job_id"]))
            assert str(worktree).startswith(f"{base}/ws.state/home/1000/worktrees/")
        assert (workspace / "a/one.txt").read_text() == "alpha\nBETA\ngamma\n"
        assert os.stat(workspace / "a/new.txt").st_uid == 1000  # written by the run user
        assert not (base / "hook-ran").exists()
        assert git(workspace, "worktree", "list", "--porcelain").count("worktree ") == 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
