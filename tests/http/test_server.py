"""The AgentCore surface through a real gunicorn on a loopback port."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import apsw
import pytest

from adapters.settings.config import LEASE_BUSY_TEXT
from tests.support.server import Server, read_events, serve

pytestmark = pytest.mark.server

# One runner for every test here, steered by the first word of the prompt.
RUNNER = (
    'read -r p; case "$p" in '
    'slow*) printf "first "; sleep 1; printf "second";; '
    # waits (at most 30 s) for the test to create ./go: no timing guesses
    'gated*) printf "first "; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; '
    'i=$((i+1)); done; printf "second";; '
    "sleepy*) sleep 30;; "
    '*) echo "$p";; esac'
)


def _ping(server: Server) -> str:
    return str(json.loads(server.request("GET", "/ping")[2])["status"])


def _ping_until(server: Server, wanted: str, limit: float = 10) -> str:
    """/ping until it says ``wanted`` (a run's thread ends just after its job is recorded)."""
    deadline = time.monotonic() + limit
    status = _ping(server)
    while status != wanted and time.monotonic() < deadline:
        time.sleep(0.05)
        status = _ping(server)
    return status


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def _wait_status(server: Server, key: str, limit: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while True:
        _, body = server.invoke({"get": key})
        if body["status"] != "running" or time.monotonic() > deadline:
            return body  # type: ignore[no-any-return]
        time.sleep(0.05)


def _sse(
    server: Server, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = server.connection(timeout=30)
    conn.request(
        "POST",
        "/invocations",
        body=json.dumps(body),
        headers={"Accept": "text/event-stream", **(headers or {})},
    )
    return conn, conn.getresponse()


def test_server_runs_sync_async_and_sse_jobs_end_to_end(workspace: Path) -> None:
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as server:
        status, body = server.invoke({"prompt": "hello"})
        assert (status, body["status"], body["result"]) == (200, "ok", "hello\n")

        _, receipt = server.invoke({"prompt": "gated job", "async": True, "id": "a1"})
        assert receipt["status"] == "accepted"
        assert server.invoke({"get": "a1"})[1]["status"] == "running"
        assert _ping(server) == "HealthyBusy"  # the run waits for ./go: it is in flight
        (workspace / "go").touch()
        assert _wait_status(server, "a1")["result"] == "first second"
        assert _ping_until(server, "Healthy") == "Healthy"
        (workspace / "go").unlink()

        conn, answer = _sse(server, {"prompt": "gated again"})
        assert answer.getheader("Content-Type") == "text/event-stream"
        events = []
        for event in read_events(answer):
            events.append(event)
            # the run holds until a keep-alive comment (0.3 s here) came after the first delta
            names = [e.get("event", "comment") for e in events]
            if "delta" in names and names[-1] == "comment":
                (workspace / "go").touch()
        conn.close()
        names = [e.get("event", "comment") for e in events if e.get("comment") != "stream open"]
        assert names[0] == "accepted" and names[-1] == "result"
        assert names.count("delta") == 2, names
        between = names[names.index("delta") : names.index("result")]
        assert "comment" in between
        result = json.loads(events[-1]["data"])
        assert result["result"] == "first second"

        # resume after the first delta: only what came later is sent again
        first_delta = next(e for e in events if e.get("event") == "delta")
        conn, answer = _sse(
            server, {"get": result["invocation"]}, {"Last-Event-ID": first_delta["id"]}
        )
        resumed = [e for e in read_events(answer) if "event" in e]
        conn.close()
        assert [e["event"] for e in resumed] == ["delta", "result"]
        assert json.loads(resumed[0]["data"]) == {"text": "second"}
        assert all(int(e["id"]) > int(first_delta["id"]) for e in resumed)


def test_server_client_disconnect_does_not_affect_the_run(workspace: Path) -> None:
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as server:
        conn, answer = _sse(server, {"prompt": "slow and alone", "id": "gone"})
        accepted = next(e for e in read_events(answer) if "event" in e)
        conn.close()  # the caller goes away right after the receipt
        invocation = json.loads(accepted["data"])["invocation"]
        body = _wait_status(server, invocation)
        assert (body["status"], body["result"]) == ("ok", "first second")


def test_server_twenty_concurrent_requests_with_one_id_run_one_job(workspace: Path) -> None:
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}, workers=2) as server:
        answers: list[dict[str, Any]] = []
        start = threading.Barrier(20)

        def call() -> None:
            start.wait(timeout=10)
            answers.append(server.invoke({"prompt": "slow same", "id": "same-id"})[1])

        threads = [threading.Thread(target=call) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(answers) == 20
        assert all("invocation" in a for a in answers), answers
        assert len({a["invocation"] for a in answers}) == 1
        assert Counter(bool(a.get("duplicate")) for a in answers)[False] <= 1
        jobs = (
            apsw.Connection(str(workspace / ".foldline" / "foldline.db"))
            .execute("SELECT count(*) FROM jobs")
            .fetchall()
        )
        assert jobs == [(1,)]


def test_server_new_job_supersedes_the_earlier_one_across_workers(workspace: Path) -> None:
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}, workers=2) as server:
        _, first = server.invoke({"prompt": "sleepy", "session": "s", "async": True})
        # Replace-only: the new run gets its own prompt alone (ADR 0048).
        status, second = server.invoke({"prompt": "quick", "session": "s", "deliver": False})
        assert (status, second["status"]) == (200, "ok")
        body = _wait_status(server, first["invocation"])
        assert (body["status"], body["supersededBy"]) == ("superseded", second["invocation"])


def test_server_sigterm_ends_an_open_stream_cleanly_and_quickly(workspace: Path) -> None:
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as server:
        conn, answer = _sse(server, {"prompt": "sleepy stream"})
        events = read_events(answer)
        assert next(e for e in events if "event" in e)["event"] == "accepted"
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        rest = list(events)
        conn.close()
        # The stop cancels the run that ignores it (ADR 0058), and the stream tells its
        # caller so before it ends.
        assert rest and rest[-1].get("event") == "result", rest[-3:]
        assert json.loads(rest[-1]["data"])["status"] == "cancelled", rest[-1]
        server.process.wait(timeout=15)
        assert time.monotonic() - started < 8


def test_server_second_instance_on_the_workspace_gets_503(workspace: Path) -> None:
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as first:
        assert first.invoke({"prompt": "mine"})[0] == 200
        with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as second:
            status, _, raw = second.request("POST", "/invocations", {"prompt": "yours"})
            assert status == 503
            assert json.loads(raw) == {"error": LEASE_BUSY_TEXT}
            assert json.loads(second.request("GET", "/ping")[2])["status"] == "Healthy"
    # after a graceful stop the lease (log and file) is released and a new server may write
    lease_file = workspace / ".foldline" / "foldline.db.lease"
    assert not lease_file.exists()
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as third:
        assert third.invoke({"prompt": "now mine"})[0] == 200
        assert json.loads(lease_file.read_text())["epoch"] == 2
    assert not lease_file.exists()


def test_server_chunked_upload_over_one_mib_is_413(workspace: Path) -> None:
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as server:
        conn = server.connection()
        chunk = b"x" * 65536
        body = (b'{"prompt": "' + chunk * 17 + b'"}',)
        conn.request(
            "POST",
            "/invocations",
            body=iter(body),
            headers={"Transfer-Encoding": "chunked"},
            encode_chunked=True,
        )
        answer = conn.getresponse()
        assert answer.status == 413
        conn.close()


def test_server_notify_hook_gets_env_and_stdin_and_is_cut_at_its_cap(workspace: Path) -> None:
    hook = (
        'cat > "$FOLDLINE_WORKSPACE/notified.txt"; '
        'echo "$FOLDLINE_JOB_ID $FOLDLINE_SESSION_ID $FOLDLINE_RUN_STATUS" '
        '>> "$FOLDLINE_WORKSPACE/notified.txt"; '
        'case "$FOLDLINE_RUN_STATUS" in ok) grep -q hang "$FOLDLINE_WORKSPACE/notified.txt" '
        "&& sleep 30;; esac; echo hook-done"
    )
    env = {"FOLDLINE_RUNNER": RUNNER, "FOLDLINE_NOTIFY": hook, "FOLDLINE_NOTIFY_TIMEOUT_S": "1"}
    db = workspace / ".foldline" / "foldline.db"
    with serve(workspace, env) as server:
        _, body = server.invoke({"prompt": "hello hook", "session": "n1"})
        deadline = time.monotonic() + 10
        row: list[Any] = []
        while time.monotonic() < deadline:
            row = (
                apsw.Connection(str(db))
                .execute(
                    "SELECT notify_pid, notify_exit_code, notify_ms, notify_stdout FROM jobs"
                    " WHERE job_id = ?",
                    (body["invocation"],),
                )
                .fetchall()
            )
            if row and row[0][2] is not None:
                break
            time.sleep(0.05)
        assert row[0][1:] == (0, row[0][2], "hook-done\n")
        lines = (workspace / "notified.txt").read_text().splitlines()
        assert lines == ["hello hook", f"{body['invocation']} n1 ok"]

        _, hung = server.invoke({"prompt": "hang please"})
        deadline = time.monotonic() + 10
        started: list[Any] = [(None,)]
        while started[0][0] is None and time.monotonic() < deadline:  # the hook is recorded
            started = (
                apsw.Connection(str(db))
                .execute("SELECT notify_pid FROM jobs WHERE job_id = ?", (hung["invocation"],))
                .fetchall()
            )
        assert started[0][0] is not None
        assert _ping(server) == "HealthyBusy"  # its hook is in flight (a 1 s cap, hung 30 s)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            row = (
                apsw.Connection(str(db))
                .execute(
                    "SELECT notify_exit_code, notify_ms FROM jobs WHERE job_id = ?",
                    (hung["invocation"],),
                )
                .fetchall()
            )
            if row[0][1] is not None:
                break
            time.sleep(0.05)
        exit_code, ms = row[0]
        assert exit_code == -9 and 900 <= ms < 5000  # killed, whole group, at the 1 s cap
        assert _ping_until(server, "Healthy") == "Healthy"


def test_server_ping_and_agent_card_leave_the_workspace_untouched(workspace: Path) -> None:
    """Lazy activation: on AgentCore the volume is mounted at the first invocation."""
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as server:
        boot = json.loads(server.process.stdout.readline())  # type: ignore[union-attr]
        assert boot["db"] == str(workspace.resolve() / ".foldline" / "foldline.db")
        assert "head" not in boot  # it says where the log will be, not that it was opened
        assert _ping(server) == "Healthy"
        status, _, raw = server.request("GET", "/.well-known/agent-card.json")
        assert status == 200 and json.loads(raw)["name"]
        assert _ping(server) == "Healthy"
        assert list(workspace.iterdir()) == []  # nothing created, nothing opened
        assert server.invoke({"prompt": "first real request"})[1]["status"] == "ok"
        assert (workspace / ".foldline" / "foldline.db").is_file()


def test_server_sse_outlives_the_sync_cap_and_its_result_is_final(workspace: Path) -> None:
    """The sync cap (1 s here) bounds plain JSON only: an SSE caller of a 3 s job gets
    keep-alives past the cap and then the final result, never a ``running`` one."""
    runner = 'read -r p; case "$p" in long*) sleep 3; echo "finally";; *) echo "$p";; esac'
    env = {"FOLDLINE_RUNNER": runner, "FOLDLINE_SYNC_WAIT_S": "1"}
    with serve(workspace, env) as server:
        capped = server.invoke({"prompt": "long plain", "id": "plain"}, timeout=20)[1]
        conn, answer = _sse(server, {"prompt": "long streamed", "id": "streamed"})
        started = time.monotonic()
        events = list(read_events(answer, limit=20))
        lasted = time.monotonic() - started
        conn.close()
    assert capped["status"] == "running"  # plain JSON still answers at the cap
    named = [e for e in events if "event" in e]
    assert [e["event"] for e in named] == ["accepted", "delta", "result"]
    result = json.loads(named[-1]["data"])
    assert (result["status"], result["result"]) == ("ok", "finally\n")
    assert lasted > 2  # it stayed open past the 1 s cap
    assert sum("comment" in e for e in events) >= 3  # keep-alives (0.3 s) while it ran


def test_server_env_reaches_the_notify_hook_and_not_the_runner(workspace: Path) -> None:
    """A variable set for ``foldline serve`` (a deployer's channel secret) is in the hook's
    environment, beside the ids, and absent from the runner's allowlisted one."""
    show = 'echo "[$CHANNEL_SECRET] [$FOLDLINE_JOB_ID]"'
    env = {
        "FOLDLINE_RUNNER": f"cat >/dev/null; {show}",
        "FOLDLINE_NOTIFY": show,
        "CHANNEL_SECRET": "s3cret",
    }
    db = workspace / ".foldline" / "foldline.db"
    with serve(workspace, env) as server:
        _, body = server.invoke({"prompt": "hello"})
        job_id = body["invocation"]
        deadline = time.monotonic() + 10
        row: list[Any] = []
        while time.monotonic() < deadline:
            row = (
                apsw.Connection(str(db))
                .execute("SELECT notify_ms, notify_stdout FROM jobs WHERE job_id = ?", (job_id,))
                .fetchall()
            )
            if row and row[0][0] is not None:
                break
            time.sleep(0.05)
    assert body["result"] == f"[] [{job_id}]\n"  # the runner: ids, no secret
    assert row[0][1] == f"[s3cret] [{job_id}]\n"  # the hook: the server's environment too
