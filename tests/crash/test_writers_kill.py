"""``kill -9`` of the server and writers (issue 28): in the middle of an integrate, recovery
leaves the patch applied and recorded or neither, never a mix; a writer cut off keeps its
worktree, and its continued run finishes there with one patch of both runs' work."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from tests.crash.test_server_recovery import kill_everything
from tests.support.server import RECOVERY_ENV, Server, serve
from tests.support.writers import agents_file, git, repository, steps

pytestmark = [pytest.mark.crash, pytest.mark.server]
FILES = 1500  # enough that writing them takes a while: the kill lands inside the write
OLD = {f"a/f{n:04}.txt": f"line {n}\n" * 200 for n in range(FILES)}
NEW = {path: text.replace("line", "LINE") for path, text in OLD.items()}


def _count(workspace: Path, kind: str, stream: str) -> int:
    db = apsw.Connection(str(workspace / ".foldline" / "foldline.db"))
    try:
        rows = db.execute(
            "SELECT count(*) FROM events WHERE event_type = ? AND stream_id = ?", (kind, stream)
        ).fetchall()
        return int(rows[0][0])
    finally:
        db.close()


def _json(server: Server, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    status, _, raw = server.request(
        method, path, body, {"Content-Type": "application/json"}, timeout=120
    )
    return status, json.loads(raw)


def _tree_is(workspace: Path, files: dict[str, str]) -> bool:
    return all((workspace / path).read_text() == text for path, text in files.items())


def _written(workspace: Path, paths: list[str]) -> bool:
    """Whether the write has reached any of ``paths`` (a file rewritten goes missing first)."""
    return any(not (workspace / p).exists() or (workspace / p).read_text() == NEW[p] for p in paths)


@pytest.mark.parametrize("when", ["after_the_intent", "mid_write"])
def test_kill_during_integrate_leaves_the_patch_applied_and_recorded_or_neither(
    tmp_path: Path, when: str
) -> None:
    workspace = tmp_path / "ws"
    repository(workspace, OLD)
    agents = agents_file(tmp_path, tmp_path / "scripts")
    env = {**RECOVERY_ENV, "FOLDLINE_AGENTS_FILE": str(agents), "FOLDLINE_RUNNER": "cat"}
    order = {"replace": [["a", "line", "LINE"]]}
    plan = [{"name": "big", "writers": [[["a"], order]], "integrate": False}]
    with serve(workspace, env) as first:
        status, _, raw = first.request(
            "POST",
            "/invocations",
            {"prompt": json.dumps(plan), "session": "s1", "agent": "root"},
            {"Content-Type": "application/json"},
            timeout=120,
        )
        said = steps(json.loads(raw)["result"])
        job = said["big waited"]["body"][0]
        assert job["state"] == "ok" and len(job["patch"]["paths"]) == FILES, job
        job_id, stream = job["job_id"], f"result:{job['job_id']}"
        assert _json(first, "GET", f"/v1/jobs/{job_id}/result")[0] == 200
        assert _json(first, "POST", f"/v1/jobs/{job_id}/result/accept", {"reason": "ok"})[0] == 200

        answers: list[Any] = []
        call = threading.Thread(
            target=lambda: answers.append(
                _safe(lambda: _json(first, "POST", f"/v1/jobs/{job_id}/result/integrate"))
            ),
            daemon=True,
        )
        call.start()
        deadline = time.monotonic() + 60
        while not _count(workspace, "result.integrating", stream):
            assert time.monotonic() < deadline, "the intent was never recorded"
            time.sleep(0.002)
        sample = sorted(NEW)[:: FILES // 30]  # 30 files across the tree
        while when == "mid_write" and not _written(workspace, sample):
            assert time.monotonic() < deadline, "the write never started"
            time.sleep(0.001)
        kill_everything(first)  # git dies with its server: nothing writes on after this
        call.join(timeout=30)
        confirmed_before_kill = _count(workspace, "result.integrated", stream)
        partly = _written(workspace, sorted(NEW)) and not all(
            (workspace / p).exists() and (workspace / p).read_text() == t for p, t in NEW.items()
        )
    # The kill landed after the intent and before the confirmation; mid-write, in between.
    assert confirmed_before_kill == 0
    assert partly or when == "after_the_intent"
    with serve(workspace, env) as second:
        deadline = time.monotonic() + 60
        while True:
            second.invoke({"get": "k"})  # a get asks for the lease: recovery follows the takeover
            status, row = _json(second, "GET", f"/v1/jobs/{job_id}")
            if status == 200 and row["result_state"] in ("integrated", "accepted"):
                break
            assert time.monotonic() < deadline, row
            time.sleep(0.1)
        if row["result_state"] == "integrated":
            assert _tree_is(workspace, NEW)
            assert _count(workspace, "result.integration_undone", stream) == 0
        else:  # undone: the tree as it was, and the integrate can be tried again
            assert _tree_is(workspace, OLD)
            assert git(workspace, "status", "--porcelain") == ""
            assert _count(workspace, "result.integration_undone", stream) == 1
            status, row = _json(second, "POST", f"/v1/jobs/{job_id}/result/integrate")
            assert status == 200 and row["result_state"] == "integrated", row
            assert _tree_is(workspace, NEW)
        assert _count(workspace, "result.integrating", stream) in (1, 2)
        assert _count(workspace, "result.integrated", stream) == 1


def _safe(call: Any) -> Any:
    """The answer, or the error of a connection the kill cut."""
    try:
        return call()
    except OSError as ex:
        return ex


def _row(server: Server, job_id: str) -> dict[str, Any]:
    status, row = _json(server, "GET", f"/v1/jobs/{job_id}")
    assert status == 200, row
    return row  # type: ignore[no-any-return]


def test_a_writer_cut_off_keeps_its_worktree_and_its_continued_run_finishes_there(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    repository(workspace, {"a/zero.txt": "0\n"})
    agents = agents_file(tmp_path, tmp_path / "scripts")
    env = {**RECOVERY_ENV, "FOLDLINE_AGENTS_FILE": str(agents), "FOLDLINE_RUNNER": "cat"}
    # Each run appends a line to a/runs.txt; the first then holds, to be killed.
    order = {"append": {"a/runs.txt": "a run\n"}, "hold": True}
    with serve(workspace, env) as first:
        first.invoke({"prompt": "hello", "session": "s1"})
        spawn = {"session": "s1", "agent": "writer", "prompt": json.dumps(order)}
        status, body = _json(first, "POST", "/v1/jobs", {**spawn, "write_scope": ["a"]})
        assert status == 201, body
        job_id = body["jobs"][0]["job_id"]
        started = [e for e in _events_of(first, "job.started") if e["stream_id"].endswith(job_id)]
        where = Path(started[0]["event"]["worktree"])
        deadline = time.monotonic() + 30
        while not (where / "a" / "runs.txt").exists():
            assert time.monotonic() < deadline, "the writer never wrote"
            time.sleep(0.05)
        kill_everything(first)
    with serve(workspace, env) as second:
        deadline = time.monotonic() + 60
        while _row(second, job_id)["state"] != "suspended":  # recovery records it cut off
            second.invoke({"get": "k"})
            assert time.monotonic() < deadline, _row(second, job_id)
            time.sleep(0.1)
        assert (where / "a" / "runs.txt").read_text() == "a run\n"  # kept through the crash
        status, _ = _json(second, "POST", f"/v1/jobs/{job_id}/continue")
        assert status == 200
        deadline = time.monotonic() + 60
        while (row := _row(second, job_id))["state"] != "ok":
            assert time.monotonic() < deadline, row
            time.sleep(0.1)
        assert row["patch"]["paths"] == ["a/runs.txt"], row
        assert f"worktree={where}" in row["result"]
        restarted = [
            e for e in _events_of(second, "job.started") if e["stream_id"].endswith(job_id)
        ]
        assert [e["event"]["worktree"] for e in restarted] == [str(where), str(where)]
        # Over: its worktree goes (the run's thread removes it just after recording the
        # end, so a reader may see ok a moment before), and its patch stays.
        deadline = time.monotonic() + 30
        while where.exists():
            assert time.monotonic() < deadline, f"{where} was never removed"
            time.sleep(0.05)
        assert b"+a run\n+a run\n" in _get_patch(second, job_id)  # both runs, one worktree
    assert git(workspace, "worktree", "list", "--porcelain").count("worktree ") == 1


def _events_of(server: Server, kind: str) -> list[dict[str, Any]]:
    status, page = _json(server, "GET", "/v1/events?limit=10000")
    assert status == 200
    return [e for e in page["events"] if e["event_type"] == kind]


def _get_patch(server: Server, job_id: str) -> bytes:
    status, _, raw = server.request("GET", f"/v1/jobs/{job_id}/patch", None, {}, timeout=30)
    assert status == 200, raw
    return raw
