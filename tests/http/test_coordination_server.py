"""Agents that coordinate workers, through a real ``foldline serve`` with real runner scripts
that call ``/v1`` back with their run tokens (issue 14)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import python_agent, workspace_with_agents
from tests.support.cli import boot_refusal
from tests.support.coordination import write_scripts
from tests.support.front import wait_until
from tests.support.server import ROOT, Server, serve
from tests.support.writers import git, repository

pytestmark = pytest.mark.server

AGENTS = """
[agents.root]
command = "{root}"
can_spawn = ["writer", "reader"]
max_children = 4
[agents.writer]
command = "{worker}"
mode = "workspace-write"
max_active = 8
resource_group = "cpu"
[agents.reader]
command = "{worker}"
[agents.fanout]
command = "{fanout}"
can_spawn = ["sleeper"]
max_children = 3
[agents.prober]
command = "{prober}"
can_spawn = ["sleeper"]
[agents.keeper]
command = "{keeper}"
can_spawn = ["sleeper"]
[agents.sleeper]
command = "cat >/dev/null; sleep 30"
max_active = 5
[limits]
max_depth = 3
max_active_agents = 16
max_active_writers = 2
"""


def _setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    commands = write_scripts(workspace)
    repository(workspace, {})  # writers get worktrees: the scripts are committed
    agents = tmp_path / "agents.toml"
    agents.write_text(AGENTS.format(**{k: v.replace('"', '\\"') for k, v in commands.items()}))
    env = {
        "FOLDLINE_AGENTS_FILE": str(agents),
        "FOLDLINE_RESOURCE_GROUPS": "cpu=4",
        "FOLDLINE_RUNNER": "cat",
    }
    return workspace, env


def _json(server: Server, method: str, path: str, body: Any = None, **headers: str) -> Any:
    status, _, raw = server.request(
        method, path, body, {"Content-Type": "application/json", **headers}, timeout=90
    )
    return status, json.loads(raw)


def _invoke(server: Server, agent: str, prompt: str, session: str) -> dict[str, Any]:
    status, body = _json(
        server,
        "POST",
        "/invocations",
        {"prompt": prompt, "session": session, **({"agent": agent} if agent else {})},
    )
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def _steps(result: str) -> dict[str, dict[str, Any]]:
    steps = {}
    for line in result.splitlines():
        if line.startswith("{"):
            step = json.loads(line)
            steps[step["step"] + (f" {len(steps)}" if step["step"] == "read" else "")] = step
    return steps


def _events(server: Server, event_type: str) -> list[dict[str, Any]]:
    status, page = _json(server, "GET", "/v1/events?limit=10000")
    assert status == 200
    return [e for e in page["events"] if e["event_type"] == event_type]


def test_root_spawns_waits_reads_accepts_rejects_and_integrates(tmp_path: Path) -> None:
    workspace, env = _setup(tmp_path)
    with serve(workspace, env, workers=2) as server:
        body = _invoke(server, "root", "go", "s1")
        assert body["status"] == "ok", body
        steps = _steps(body["result"])
        overlap = steps["overlap"]
        assert overlap["status"] == 429
        assert overlap["body"]["error"]["reason"] == "write_scope_conflict"
        batch = steps["batch"]
        assert batch["status"] == 201, batch
        children = batch["body"]["jobs"]
        assert [j["agent"] for j in children] == ["writer", "writer", "reader"]
        root_id = children[0]["parent_job"]
        assert {j["parent_job"] for j in children} == {root_id}
        assert {j["depth"] for j in children} == {2}
        assert len({j["batch"] for j in children}) == 1
        waited = {j["job_id"]: j for j in steps["waited"]["body"]}
        assert {j["state"] for j in waited.values()} == {"ok"}
        assert all(
            j["warnings"] == [f"checked only {j_in}"]
            for j, j_in in zip(waited.values(), ["a", "b", "look"], strict=True)
        )
        reads = [s for name, s in steps.items() if name.startswith("read")]
        assert [r["body"]["text"].splitlines()[-1] for r in reads] == [
            "worked on a",
            "worked on b",
            "worked on look",
        ]
        assert {r["body"]["result_state"] for r in reads} == {"read"}
        assert steps["accept"]["status"] == 200
        assert steps["accept"]["body"]["result_state"] == "accepted"
        assert steps["accept again"]["status"] == 409
        assert steps["reject"]["body"]["result_state"] == "rejected"
        assert steps["reject"]["body"]["result_reason"] == "wrong"
        assert steps["integrate rejected"]["status"] == 409
        assert steps["integrate wrong sha"]["status"] == 409
        assert steps["integrate"]["body"]["result_state"] == "integrated"
        patch = waited[children[0]["job_id"]]["patch"]  # the writer changed nothing
        assert patch["paths"] == [] and patch["size"] == 0
        assert steps["integrate"]["body"]["result_sha256"] == patch["sha256"]
        assert steps["spawn unknown"]["status"] == 400
        assert steps["spawn forbidden"]["status"] == 403
        listed = steps["children"]["body"]["jobs"]
        assert sorted(j["job_id"] for j in listed) == sorted(waited)
        # The refused batch appended nothing: root + the three admitted children.
        assert len(_events(server, "job.accepted")) == 4
        # The third child was never read by anyone else; the operator sees the same row.
        _, row = _json(server, "GET", f"/v1/jobs/{children[2]['job_id']}")
        assert row["result_state"] == "read" and row["warnings"] == ["checked only look"]
        # The run token was recorded as a digest only.
        started = _events(server, "job.started")
        assert all(len(e["event"]["token_digest"]) == 64 for e in started)
        # The refused batch's worktrees went at once, the admitted writers' once they ended.
        deadline = time.monotonic() + 30
        while git(workspace, "worktree", "list", "--porcelain").count("worktree ") != 1:
            assert time.monotonic() < deadline, git(workspace, "worktree", "list")
            time.sleep(0.05)
        assert git(workspace, "branch", "--list", "foldline/*") == ""


def test_max_children_is_exact_under_sixteen_concurrent_spawns(tmp_path: Path) -> None:
    workspace, env = _setup(tmp_path)
    with serve(workspace, env, workers=2) as server:
        status, receipt = _json(
            server,
            "POST",
            "/invocations",
            {"prompt": "go", "session": "s1", "agent": "fanout", "async": True},
        )
        assert status == 200, receipt
        # The fanout's run exits with its sleepers running: it settles until they end (ADR
        # 0050), its run's result already on its row.
        root = f"/v1/jobs/{receipt['invocation']}"
        wait_until(lambda: _json(server, "GET", root)[1]["state"] == "settling", 60, "settling")
        text = _json(server, "GET", root)[1]["result"]
        summary = json.loads(text.splitlines()[0])
        assert summary["statuses"] == [201] * 3 + [429] * 13
        assert summary["reasons"] == ["", "max_children"]
        status, page = _json(server, "GET", "/v1/jobs?state=running")
        assert len([j for j in page["jobs"] if j["agent"] == "sleeper"]) == 3
        # The fanout's run is over: its token is refused now.
        token = text.splitlines()[1].removeprefix("TOKEN ")
        status, refused = _json(
            server,
            "POST",
            "/v1/jobs",
            {"agent": "sleeper", "prompt": "late"},
            Authorization=f"Bearer {token}",
        )
        assert status == 401, refused
        _cancel_all(server)


def test_per_agent_max_active_is_exact_under_sixteen_concurrent_operator_spawns(
    tmp_path: Path,
) -> None:
    workspace, env = _setup(tmp_path)
    with serve(workspace, env, workers=2) as server:
        _invoke(server, "", "hello", "s1")  # the session exists, running
        _invoke(server, "", "hello", "s2")
        answers: list[tuple[int, Any]] = []

        def one(n: int) -> None:
            session = "s1" if n % 2 else "s2"  # max_active counts across sessions
            answers.append(
                _json(
                    server,
                    "POST",
                    "/v1/jobs",
                    {"session": session, "agent": "sleeper", "prompt": str(n)},
                )
            )

        threads = [threading.Thread(target=one, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        statuses = sorted(status for status, _ in answers)
        assert statuses == [201] * 5 + [429] * 11
        assert {b["error"]["reason"] for s, b in answers if s == 429} == {"max_active"}
        _cancel_all(server)


def _cancel_all(server: Server) -> None:
    _, page = _json(server, "GET", "/v1/jobs?state=running")
    for job in page["jobs"]:
        _json(server, "POST", f"/v1/jobs/{job['job_id']}/cancel")


def test_an_invalid_agents_file_is_a_one_line_boot_error(tmp_path: Path) -> None:
    bad = tmp_path / "agents.toml"
    bad.write_text('[agents.w]\ncommand = "x"\nmode = "admin"\n')
    assert "mode" in boot_refusal(tmp_path / "ws", "FOLDLINE_AGENTS_FILE", bad)


def test_an_unknown_agent_on_invocations_is_a_400(tmp_path: Path) -> None:
    workspace, env = _setup(tmp_path)
    with serve(workspace, env) as server:
        status, body = _json(server, "POST", "/invocations", {"prompt": "x", "agent": "nobody"})
        assert status == 400 and "nobody" in json.dumps(body)
        assert _events(server, "job.accepted") == []


WARNS = 'cat >/dev/null; echo "WARNING: low disk"; echo "WARNING: slow net"; echo done'


def test_warning_lines_make_an_ok_with_warnings_in_every_surface(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_RUNNER": WARNS}) as server:
        status, body = _json(server, "POST", "/invocations", {"prompt": "x"})
        assert status == 200 and body["status"] == "ok", body
        assert body["warnings"] == ["low disk", "slow net"]
        _, row = _json(server, "GET", f"/v1/jobs/{body['invocation']}")
        assert row["state"] == "ok" and row["warnings"] == ["low disk", "slow net"]
        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "x"}]}
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        _, answer = _json(server, "POST", "/", rpc)
        task = answer["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["status"]["message"]["parts"][0]["text"] == (
            "completed with warnings: low disk; slow net"
        )
        assert "done" in task["artifacts"][0]["parts"][0]["text"]


def test_the_documented_worked_example_runs_as_the_root_agent(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "agents-and-workers.md").read_text()
    example = page.split("```python\n", 1)[1].split("```", 1)[0]
    # The writer puts its prompt in part<n>/notes.txt, inside its scope.
    writer = (
        'read -r task; dir=part${task##* }; mkdir -p "$dir"'
        ' && printf "%s\\n" "$task" > "$dir/notes.txt" && echo "wrote $dir"'
    )
    workspace, agents = workspace_with_agents(
        tmp_path,
        {"root.py": example},
        {"root": python_agent("root.py"), "worker": writer},
        can_spawn={"root": ["worker"]},
    )
    agents.write_text(
        agents.read_text().replace(
            "[agents.worker]\n", '[agents.worker]\nmode = "workspace-write"\n'
        )
    )
    repository(workspace, {})
    env = {"FOLDLINE_AGENTS_FILE": str(agents), "FOLDLINE_RUNNER": "cat"}
    with serve(workspace, env) as server:
        body = _invoke(server, "root", "sort the files", "s1")
        assert body["status"] == "ok", body
        assert body["result"].splitlines() == [
            "integrated part1/notes.txt wrote part1",
            "integrated part2/notes.txt wrote part2",
        ]
        _, page = _json(server, "GET", f"/v1/jobs?parent={body['invocation']}")
        assert [j["result_state"] for j in page["jobs"]] == ["integrated", "integrated"]
    for n in (1, 2):
        assert (workspace / f"part{n}" / "notes.txt").read_text() == f"sort the files, part {n}\n"


def test_a2a_metadata_picks_the_agent_and_an_unknown_one_is_invalid_params(
    tmp_path: Path,
) -> None:
    workspace, env = _setup(tmp_path)
    with serve(workspace, env) as server:

        def send(message_id: str, agent: str) -> Any:
            message = {
                "messageId": message_id,
                "role": "ROLE_USER",
                "parts": [{"text": "look"}],
                "metadata": {"agent": agent},
            }
            rpc = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message},
            }
            return _json(server, "POST", "/", rpc)[1]

        task = send("m1", "reader")["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert (
            task["status"]["message"]["parts"][0]["text"]
            == "completed with warnings: checked only look"
        )
        _, page = _json(server, "GET", "/v1/jobs")
        assert [j["agent"] for j in page["jobs"]] == ["reader"]
        assert send("m2", "nobody")["error"]["code"] == -32602


def test_a_run_token_is_refused_for_another_sessions_jobs(tmp_path: Path) -> None:
    workspace, env = _setup(tmp_path)
    with serve(workspace, env) as server:
        other = _invoke(server, "", "elsewhere", "s2")
        body = _invoke(server, "prober", f"{other['invocation']} s2", "s1")
        assert json.loads(body["result"]) == {"read": 403, "accept": 403, "spawn": 403}
        _, row = _json(server, "GET", f"/v1/jobs/{other['invocation']}")
        assert row["result_state"] == "unread"


def test_cancel_of_a_spawning_job_cancels_its_spawned_subtree(tmp_path: Path) -> None:
    workspace, env = _setup(tmp_path)
    with serve(workspace, env) as server:
        status, receipt = _json(
            server,
            "POST",
            "/invocations",
            {"prompt": "go", "agent": "keeper", "session": "s1", "async": True},
        )
        assert status == 200, receipt
        keeper = receipt["invocation"]
        children: list[str] = []
        for _ in range(40):  # each round blocks on the log until the keeper changes
            _, events = _json(server, "GET", f"/v1/streams/job:{keeper}/events")
            said = "".join(e["event"].get("text", "") for e in events["events"])
            if "spawned" in said:
                children = said.split("spawned ", 1)[1].split()
                break
            _json(server, "GET", f"/v1/jobs/wait?ids={keeper}&timeout=2")
        assert len(children) == 2
        status, row = _json(server, "POST", f"/v1/jobs/{keeper}/cancel", {"reason": "enough"})
        assert status == 200, row
        ids = ",".join([keeper, *children])
        for _ in range(20):
            _, waited = _json(server, "GET", f"/v1/jobs/wait?ids={ids}&timeout=5")
            if all(j["finished_at"] for j in waited["jobs"]):
                break
        assert [j["state"] for j in waited["jobs"]] == ["cancelled"] * 3
        assert [j["reason"] for j in waited["jobs"][1:]] == ["enough", "enough"]
