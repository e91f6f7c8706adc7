"""The AgentCore contract through falcon's test client: every status and body shape."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from adapters.settings.agents import Agents
from adapters.settings.config import LEASE_BUSY_TEXT
from engine.domain import commands as c
from engine.domain.agents import DEFAULT_AGENT, AgentPolicy
from engine.errors import ChainBroken, EngineError, LogMissing, StorageError, StorageFull
from tests.http.conftest import MakeClient, sql
from tests.support import runners

PROMPT = {"prompt": "hello world"}


def post(client: Any, body: Any, **headers: str) -> Any:
    payload = body if isinstance(body, (bytes, str)) else None
    return client.simulate_post(
        "/invocations",
        json=None if payload is not None else body,
        body=payload,
        headers=headers or None,
    )


def job_count(runtime: Any) -> int:
    return int(sql(runtime, "SELECT count(*) FROM jobs")[0][0])


def test_ping_is_healthy_and_never_takes_the_lease(make_client: MakeClient) -> None:
    client, runtime = make_client()
    answer = client.simulate_get("/ping")
    assert answer.status_code == 200
    assert answer.json["status"] == "Healthy"
    assert isinstance(answer.json["time_of_last_update"], int)
    assert runtime.lease_holder() is None


def test_invocation_sync_answers_the_finished_job_body(make_client: MakeClient) -> None:
    a1 = Agents(
        commands={"": runners.ECHO, "a1": runners.ECHO},
        policies={"": DEFAULT_AGENT, "a1": AgentPolicy(name="a1")},
    )
    client, runtime = make_client(runners.ECHO, agents=a1)
    answer = post(client, {"prompt": "hello world", "id": "call-1", "agent": "a1"})
    assert answer.status_code == 200
    assert sql(runtime, "SELECT agent FROM jobs") == [("a1",)]
    body = answer.json
    assert (body["status"], body["state"], body["result"], body["id"]) == (
        "ok",
        "ok",
        "hello world",
        "call-1",
    )
    assert body["invocation"].startswith("job_") and body["session"].startswith("inv_")
    assert body["startedAt"] <= body["finishedAt"] and body["files"] == []
    assert "supersededBy" not in body
    assert runtime.lease_holder() == ("test-holder", 1)


def test_invocation_exit_code_other_than_zero_is_error(make_client: MakeClient) -> None:
    client, _ = make_client(runners.FAIL)
    body = post(client, PROMPT).json
    assert (body["status"], body["result"]) == ("error", "it broke\n")


def test_invocation_media_lines_inside_the_workspace_become_files(
    make_client: MakeClient, workspace: Path
) -> None:
    (workspace / "out.txt").write_text("12345")
    client, _ = make_client(runners.MEDIA)
    body = post(client, PROMPT).json
    assert body["files"] == [{"path": "out.txt", "size": 5, "workspace_path": "out.txt"}]


def test_invocation_files_keep_the_path_the_agent_printed(
    make_client: MakeClient, workspace: Path
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "out.txt").write_text("12345")
    client, _ = make_client(runners.MEDIA_SPELLED)
    body = post(client, PROMPT).json
    printed = [f["path"] for f in body["files"]]
    assert printed == ["./sub/../out.txt", f"{workspace.resolve()}/out.txt"]
    assert [f["workspace_path"] for f in body["files"]] == ["out.txt", "out.txt"]


def test_invocation_runner_gets_job_env_and_prompt_on_stdin(make_client: MakeClient) -> None:
    client, _ = make_client(runners.ENV)
    body = post(client, {"prompt": "x", "session": "my-session"}).json
    job_id, session_id, run_id, resumed = body["result"].split()
    assert (job_id, session_id, resumed) == (body["invocation"], "my-session", "0")
    assert run_id.startswith("run_")


def test_invocation_async_answers_the_receipt_then_get_reads_the_job(
    make_client: MakeClient,
) -> None:
    client, _ = make_client(runners.SLOW)
    receipt = post(client, {"prompt": "a", "async": True, "id": "k"}).json
    assert receipt["status"] == "accepted" and receipt["id"] == "k"
    assert set(receipt) == {"status", "invocation", "session", "id"}
    first = post(client, {"get": receipt["invocation"]}).json
    assert first["status"] == "running"
    deadline = time.monotonic() + 15
    body = first
    while body["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
        body = post(client, {"get": "k"}).json  # by the caller's id this time
    assert (body["status"], body["result"]) == ("ok", "got: a\ndone\n")


def test_invocation_duplicate_id_answers_current_body_in_json_and_runs_nothing(
    make_client: MakeClient,
) -> None:
    client, runtime = make_client(runners.ECHO)
    first = post(client, {"prompt": "one", "id": "same"}).json
    again = post(client, {"prompt": "two", "id": "same"}, Accept="text/event-stream")
    assert again.headers["content-type"].startswith("application/json")
    assert again.json == {**first, "duplicate": True}
    assert job_count(runtime) == 1


def test_invocation_sse_sends_accepted_deltas_and_result_with_positions(
    make_client: MakeClient,
) -> None:
    client, _ = make_client(runners.TICKS)
    answer = post(client, PROMPT, Accept="text/event-stream")
    assert answer.headers["content-type"] == "text/event-stream"
    events = [block for block in answer.text.split("\n\n") if block.strip()]
    names = [
        line[7:] for block in events for line in block.splitlines() if line.startswith("event: ")
    ]
    assert names[0] == "accepted" and names[-1] == "result"
    assert set(names[1:-1]) <= {"delta"} and "delta" in names
    ids = [
        int(line[4:]) for block in events for line in block.splitlines() if line.startswith("id: ")
    ]
    assert ids == sorted(ids) and len(ids) == len(names)
    assert '"tick6 "' not in events[0]


def test_invocation_new_job_supersedes_the_earlier_one_on_a_session(
    make_client: MakeClient,
) -> None:
    client, runtime = make_client(runners.SLEEPY)
    first = post(client, {"prompt": "a", "session": "s", "async": True}).json
    second = post(client, {"prompt": "b", "session": "s", "async": True}).json
    body = post(client, {"get": first["invocation"]}).json
    assert (body["status"], body["supersededBy"]) == ("superseded", second["invocation"])
    pid = sql(runtime, "SELECT pid FROM jobs WHERE job_id = ?", first["invocation"])[0][0]
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the superseded run must be killed"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # the process may be reaped between the two looks
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_invocation_on_a_session_owing_an_a2a_task_is_409(make_client: MakeClient) -> None:
    client, runtime = make_client()
    post(client, {"prompt": "warm up", "session": "busy"})
    runtime.engine.handle(c.CreateTask(task_id="t1", session_id="busy"))
    answer = post(client, {"prompt": "x", "session": "busy"})
    assert answer.status_code == 409
    assert "owes an A2A task" in answer.json["error"]


def test_invocation_when_another_server_holds_the_lease_is_503(make_client: MakeClient) -> None:
    first, _ = make_client(holder="server-one")
    assert post(first, PROMPT).status_code == 200
    second, runtime = make_client(holder="server-two")
    answer = post(second, PROMPT)
    assert answer.status_code == 503
    # The text is byte-stable (raw UTF-8 em dash); the JSON around it is compact.
    assert answer.json == {"error": LEASE_BUSY_TEXT}
    assert LEASE_BUSY_TEXT.encode() in answer.content
    assert "\u2014" in answer.text
    assert second.simulate_get("/ping").json["status"] == "Healthy"
    assert job_count(runtime) == 1


def test_invocation_dispatch_failure_is_500_with_no_job_and_a_retry_runs(
    make_client: MakeClient, workspace: Path, tmp_path: Path
) -> None:
    # The log in a directory of its own: a run sees nothing of the log's directory (ADR 0064),
    # so one that held the workspace would hide it from every run.
    (tmp_path / "elsewhere").mkdir()
    db = tmp_path / "elsewhere" / "log.db"
    client, runtime = make_client(db=db)
    warm = post(client, {"prompt": "warm up"})  # opens the log and takes the lease
    assert warm.json["status"] == "ok", warm.json
    os.rename(workspace, tmp_path / "moved")  # the runner's cwd is gone
    answer = post(client, {"prompt": "x", "id": "retry-me"})
    assert answer.status_code == 500 and "runner could not start" in answer.json["error"]
    assert job_count(runtime) == 1
    os.rename(tmp_path / "moved", workspace)
    again = post(client, {"prompt": "x", "id": "retry-me"}).json
    assert again["status"] == "ok", again["result"]


def test_invocation_get_of_an_unknown_key_is_404(make_client: MakeClient) -> None:
    client, _ = make_client()
    answer = post(client, {"get": "nope"})
    assert answer.status_code == 404 and "nope" in answer.json["error"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "JSON object"),
        (b"[1, 2]", "JSON object"),
        ({}, "exactly one of prompt or promptFile"),
        ({"prompt": "a", "promptFile": "b"}, "exactly one"),
        ({"prompt": 5}, "non-empty string"),
        ({"prompt": ""}, "non-empty string"),
        ({"prompt": "a", "session": "bad session!"}, "session must match"),
        ({"prompt": "a", "session": "x" * 201}, "session"),
        ({"prompt": "a", "id": "x" * 257}, "id must be"),
        ({"prompt": "a", "id": 7}, "id must be"),
        ({"prompt": "a", "async": "yes"}, "async"),
        ({"prompt": "a", "agent": ["x"]}, "agent"),
        ({"get": 3}, "get must be"),
        ({"get": "k", "prompt": "a"}, "takes no prompt"),
    ],
)
def test_invocation_bad_shape_is_400_and_touches_nothing(
    make_client: MakeClient, body: Any, message: str
) -> None:
    client, runtime = make_client()
    answer = post(client, body)
    assert answer.status_code == 400
    assert message in answer.json["error"]
    assert runtime.lease_holder() is None  # shape errors come before the lease


def test_invocation_unknown_fields_are_ignored(make_client: MakeClient) -> None:
    client, _ = make_client()
    assert post(client, {"prompt": "a", "extra": {"x": 1}}).json["status"] == "ok"


def test_invocation_body_over_one_mib_is_413(make_client: MakeClient) -> None:
    client, runtime = make_client()
    answer = post(client, {"prompt": "x" * (1 << 20)})
    assert answer.status_code == 413
    assert job_count(runtime) == 0


@pytest.mark.parametrize(
    ("setup", "name", "message"),
    [
        (None, "/etc/hostname", "relative"),
        (None, "../outside.txt", "without '..'"),
        ("link", "link.txt", "outside the workspace"),
        ("dir", "folder", "regular file"),
        ("internal", ".foldline/x.txt", ".foldline"),
        ("empty", "empty.txt", "1 to"),
        ("big", "big.txt", "1 to"),
        (None, "missing.txt", "regular file"),
    ],
)
def test_invocation_prompt_file_is_confined_to_the_workspace(
    make_client: MakeClient,
    workspace: Path,
    tmp_path: Path,
    setup: str | None,
    name: str,
    message: str,
) -> None:
    (tmp_path / "outside.txt").write_text("secret")
    if setup == "link":
        (workspace / "link.txt").symlink_to(tmp_path / "outside.txt")
    elif setup == "dir":
        (workspace / "folder").mkdir()
    elif setup == "internal":
        (workspace / ".foldline").mkdir(exist_ok=True)
        (workspace / ".foldline" / "x.txt").write_text("log")
    elif setup == "empty":
        (workspace / "empty.txt").write_text("")
    elif setup == "big":
        (workspace / "big.txt").write_bytes(b"x" * ((1 << 20) + 1))
    client, _ = make_client()
    answer = post(client, {"promptFile": name})
    assert answer.status_code == 400
    assert message in answer.json["error"]


def test_invocation_prompt_file_is_fed_to_the_runner(
    make_client: MakeClient, workspace: Path
) -> None:
    (workspace / "task.md").write_text("from a file")
    client, _ = make_client(runners.ECHO)
    assert post(client, {"promptFile": "task.md"}).json["result"] == "from a file"


def test_invocation_unexpected_error_is_a_plain_500_without_trace(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, runtime = make_client()

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(runtime, "ensure_lease", broken)
    answer = post(client, PROMPT)
    assert answer.status_code == 500
    assert "secret" not in answer.text and "Traceback" not in answer.text


@pytest.mark.parametrize(
    ("error", "status", "retry_after"),
    [
        (StorageFull("sqlite: FullError: database or disk is full"), 507, "5"),
        (StorageError("sqlite: IOError: disk I/O error"), 503, "5"),
        (LogMissing("the log is gone"), 503, None),
        (ChainBroken("position 7 does not link"), 500, None),
    ],
)
def test_invocation_storage_fault_keeps_its_server_status_never_a_409(
    make_client: MakeClient,
    monkeypatch: pytest.MonkeyPatch,
    error: EngineError,
    status: int,
    retry_after: str | None,
) -> None:
    """The server's own trouble is no conflict in the request: the status of the one table,
    the AgentCore body with the stable code, and ``Retry-After`` when it passes by itself."""
    client, runtime = make_client()

    def failing(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(runtime.invocations, "dispatch", failing)
    answer = post(client, PROMPT)
    assert answer.status_code == status
    assert answer.json == {"error": error.message, "code": error.code}
    assert answer.headers.get("Retry-After") == retry_after
