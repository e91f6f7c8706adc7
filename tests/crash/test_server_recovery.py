"""kill -9 of a whole server mid-job: the next server takes over and the job finishes once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from adapters.settings.config import LEASE_BUSY_TEXT
from engine import open_log
from engine.domain import MACHINES
from projections import default_projections
from tests.support.server import RECOVERY_ENV, RECOVERY_RUNNER, Server, serve
from tests.support.server import poll_invocation as _poll

pytestmark = [pytest.mark.crash, pytest.mark.server]

RUNNER = RECOVERY_RUNNER
ENV = RECOVERY_ENV


def _db(workspace: Path) -> apsw.Connection:
    return apsw.Connection(str(workspace / ".foldline" / "foldline.db"))


def kill_everything(server: Server) -> None:
    """SIGKILL the master, its workers and every runner process group it started.

    The server goes first: a runner thread notices its child's end at once (it waits on the
    process), so a server still alive when its runs are killed would record them as ended."""
    runs = (
        _db(server.workspace)
        .execute("SELECT pid FROM jobs WHERE state IN ('running', 'cancelling') AND pid > 1")
        .fetchall()
    )
    os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=10)
    for (pid,) in runs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_recovery_after_sigkill_finishes_the_cut_off_job_exactly_once(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, ENV, workers=2) as first:
        _, receipt = first.invoke({"prompt": "slow work", "id": "k1", "async": True})
        # the receipt comes after the commit that recorded the run: it is under way
        with serve(workspace, ENV) as second:
            status, _, raw = second.request("POST", "/invocations", {"prompt": "mine?"})
            assert status == 503 and LEASE_BUSY_TEXT in raw.decode()
            kill_everything(first)
            # the caller keeps asking the new server: running (cut off, then resumed), then ok
            running = second.invoke({"get": "k1"})[1]
            assert running["status"] == "running"
            body = _poll(second, "k1", "ok")
            assert body["invocation"] == receipt["invocation"]
            assert body["result"] == "done: slow work resumed=1\n"
            assert second.invoke({"prompt": "after recovery"})[1]["status"] == "ok"
            lease_file = json.loads((workspace / ".foldline" / "foldline.db.lease").read_text())
            assert lease_file["epoch"] == 2  # the file gate was taken over too
    db = _db(workspace)
    finished = db.execute(
        "SELECT count(*) FROM events WHERE stream_id = ? AND event_type = 'job.finished'",
        (f"job:{receipt['invocation']}",),
    ).fetchall()
    assert finished == [(1,)]
    kinds = [
        r[0]
        for r in db.execute(
            "SELECT event_type FROM events WHERE stream_id = ? ORDER BY version",
            (f"job:{receipt['invocation']}",),
        )
    ]
    assert kinds[:2] == ["job.accepted", "job.started"]
    assert "job.suspended" in kinds and kinds.count("job.started") == 2
    lease = db.execute(
        "SELECT event_type, epoch FROM events WHERE stream_id = 'lease:workspace'"
        " AND event_type != 'lease.renewed' ORDER BY position"
    ).fetchall()
    assert lease[:2] == [("lease.acquired", 1), ("lease.taken_over", 2)]
    log = open_log(workspace / ".foldline" / "foldline.db", MACHINES, default_projections())
    assert log.verify_chain() == []
    assert log.content_hash() == log.rebuild()
    log.close()


def test_zombie_holder_woken_after_a_takeover_writes_nothing_and_exits(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, ENV) as first:
        _, receipt = first.invoke({"prompt": "slow zombie", "id": "z1", "async": True})
        runner_pid = (
            _db(workspace)
            .execute("SELECT pid FROM jobs WHERE job_id = ?", (receipt["invocation"],))
            .fetchall()[0][0]
        )
        os.killpg(first.process.pid, signal.SIGSTOP)  # master and workers freeze
        os.killpg(runner_pid, signal.SIGSTOP)
        try:
            with serve(workspace, ENV) as second:
                body = _poll(second, "z1", "ok")  # waits out the stale window, takes over
                assert body["result"] == "done: slow zombie resumed=1\n"
                takeover = (
                    _db(workspace)
                    .execute(
                        "SELECT max(position) FROM events WHERE event_type = 'lease.taken_over'"
                    )
                    .fetchall()[0][0]
                )
                os.killpg(first.process.pid, signal.SIGCONT)
                with contextlib.suppress(ProcessLookupError):  # killed as an orphan already
                    os.killpg(runner_pid, signal.SIGCONT)
                first.process.wait(timeout=20)  # it sees the newer epoch and exits
                late = (
                    _db(workspace)
                    .execute(
                        "SELECT count(*) FROM events WHERE position > ? AND epoch < 2", (takeover,)
                    )
                    .fetchall()
                )
                assert late == [(0,)], "the zombie wrote after the takeover"
                assert second.invoke({"prompt": "still serving"})[1]["status"] == "ok"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(first.process.pid, signal.SIGCONT)
    finished = (
        _db(workspace)
        .execute(
            "SELECT count(*) FROM events WHERE stream_id = ? AND event_type = 'job.finished'",
            (f"job:{receipt['invocation']}",),
        )
        .fetchall()
    )
    assert finished == [(1,)]


def _notify_started(workspace: Path, job_id: str) -> int:
    """The hook's pid, once its start is recorded (at most 10 s)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pid = (
            _db(workspace)
            .execute("SELECT notify_pid FROM jobs WHERE job_id = ?", (job_id,))
            .fetchall()[0][0]
        )
        if pid is not None:
            return int(pid)
        time.sleep(0.05)
    raise AssertionError(f"the notify hook of {job_id} was never recorded as started")


def _events_of(workspace: Path, job_id: str, event_type: str) -> int:
    return int(
        _db(workspace)
        .execute(
            "SELECT count(*) FROM events WHERE stream_id = ? AND event_type = ?",
            (f"job:{job_id}", event_type),
        )
        .fetchall()[0][0]
    )


def test_kill_during_a_notify_hook_never_runs_it_twice_and_records_it_lost(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {
        **ENV,
        "FOLDLINE_NOTIFY": 'echo start >> "$FOLDLINE_WORKSPACE/hook.log"; sleep 30',
        "FOLDLINE_NOTIFY_TIMEOUT_S": "2",
    }
    with serve(workspace, env) as first:
        _, body = first.invoke({"prompt": "notify me", "id": "n1"})
        pid = _notify_started(workspace, body["invocation"])
        deadline = time.monotonic() + 10  # the hook has run its first line
        while not (workspace / "hook.log").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        kill_everything(first)  # the server first: nobody may record the hook's end
        os.killpg(pid, signal.SIGKILL)  # then the hook's own group
    with serve(workspace, env) as second:
        deadline = time.monotonic() + 20
        status = 503
        while status == 503 and time.monotonic() < deadline:  # until the stale lease is taken
            status, answer = second.invoke({"prompt": "another"})
            time.sleep(0.1)
        assert status == 200 and answer["status"] == "ok"
        # the new job's own hook is in flight now; once it is cut at its cap, nothing is busy
        _notify_started(workspace, answer["invocation"])
        deadline = time.monotonic() + 20
        while _events_of(workspace, answer["invocation"], "job.notify_finished") == 0:
            assert time.monotonic() < deadline, "the second hook never finished"
            time.sleep(0.05)
        # the lost hook is not in flight: /ping is not pinned at HealthyBusy
        ping = "HealthyBusy"
        deadline = time.monotonic() + 10
        while ping != "Healthy" and time.monotonic() < deadline:
            ping = json.loads(second.request("GET", "/ping")[2])["status"]
        assert ping == "Healthy"
        status, _, raw = second.request("GET", f"/v1/jobs/{body['invocation']}")
        assert status == 200 and json.loads(raw)["notify_lost"] is True
        status, _, raw = second.request("GET", f"/v1/jobs/{answer['invocation']}")
        assert json.loads(raw)["notify_lost"] is False
        metrics = second.request("GET", "/metrics")[2].decode()
        assert "foldline_notify_lost_total 1" in metrics.splitlines()
    lines = (workspace / "hook.log").read_text().splitlines()
    assert lines.count("start") == 2  # one hook for each job: the first was never re-run
    job = body["invocation"]
    assert [
        _events_of(workspace, job, kind)
        for kind in ("job.notify_started", "job.notify_finished", "job.notify_lost")
    ] == [1, 0, 1]


def _lease_file(workspace: Path) -> dict[str, Any]:
    return json.loads((workspace / ".foldline" / "foldline.db.lease").read_text())  # type: ignore[no-any-return]


def _write_whole(path: Path, text: str) -> None:
    """Replace the lease file as servers do (temp file, rename): never seen half-written."""
    temporary = path.with_name(path.name + ".test.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _take_over(server: Server, key: str, limit: float = 30) -> dict[str, Any]:
    """``get`` until the server holds the lease (it judges the old holder stale first)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        status, body = server.invoke({"get": key})
        assert status == 200
        rows = _db(server.workspace).execute(
            "SELECT count(*) FROM events WHERE event_type = 'lease.taken_over'"
        )
        if rows.fetchall()[0][0]:
            return body
        time.sleep(0.1)
    raise AssertionError("the second server never took the lease over")


def test_lease_file_of_an_older_epoch_is_restored_and_the_new_holder_keeps_serving(
    tmp_path: Path,
) -> None:
    """Fault 1, deterministic: the old holder's record written over the new holder's file (what
    a woken zombie finishing a renewal does) never unseats the newer epoch."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = workspace / ".foldline" / "foldline.db.lease"
    with serve(workspace, ENV) as first:
        first.invoke({"prompt": "quick", "id": "e1"})
        old_record = path.read_text()
        assert json.loads(old_record)["epoch"] == 1
        kill_everything(first)
    with serve(workspace, ENV) as second:
        _take_over(second, "e1")
        mine = _lease_file(workspace)
        assert mine["epoch"] == 2
        _write_whole(path, old_record)  # the zombie's late write
        deadline = time.monotonic() + 10  # the next renewal check puts it right (0.25 s)
        while _lease_file(workspace)["holder"] != mine["holder"]:
            assert time.monotonic() < deadline, "the holder never restored its record"
            time.sleep(0.05)
        assert _lease_file(workspace)["epoch"] == 2
        assert second.process.poll() is None
        assert second.invoke({"prompt": "still serving"})[1]["status"] == "ok"
        # a record of a newer epoch does end the tenure: the holder stops at once. (A renewal
        # already past its check may still write its own record once: then write it again.)
        newer = json.dumps({**mine, "holder": "newer", "epoch": 3})
        _write_whole(path, newer)
        deadline = time.monotonic() + 20
        while second.process.poll() is None:
            assert time.monotonic() < deadline, "the holder never stopped for a newer epoch"
            if _lease_file(workspace)["holder"] != "newer":
                _write_whole(path, newer)
            time.sleep(0.05)
        status = 0
        with contextlib.suppress(OSError):
            status = second.request("POST", "/invocations", {"prompt": "x"}, timeout=5)[0]
        assert status in (0, 503)


def test_takeover_is_confirmed_before_anything_is_appended(tmp_path: Path) -> None:
    """Fault 7: a contender that loses the confirm window has written nothing to the log."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {**ENV, "FOLDLINE_LEASE_CONFIRM_S": "3"}
    path = workspace / ".foldline" / "foldline.db.lease"
    with serve(workspace, env) as first:
        first.invoke({"prompt": "quick", "id": "c1"})
        old_holder = _lease_file(workspace)["holder"]
        kill_everything(first)
    head_before = _db(workspace).execute("SELECT max(position) FROM events").fetchall()[0][0]
    with serve(workspace, env) as second:
        stop = threading.Event()

        def poll() -> None:  # a caller that keeps asking: it drives the takeover attempt
            for _ in range(400):
                if stop.is_set():
                    return
                second.invoke({"get": "c1"}, timeout=30)
                time.sleep(0.05)

        caller = threading.Thread(target=poll)
        caller.start()
        try:
            deadline = time.monotonic() + 20
            while _lease_file(workspace)["holder"] == old_holder:  # the contender's claim
                assert time.monotonic() < deadline, "the second server never claimed the file"
                time.sleep(0.02)
            # within its confirm window, another contender's record replaces it
            _write_whole(
                path,
                json.dumps(
                    {"holder": "other", "epoch": 2, "host": "h", "pid": 1, "renewed_at": 0.0}
                ),
            )
        finally:
            stop.set()
            caller.join(timeout=60)
        assert not caller.is_alive()
        rows = (
            _db(workspace)
            .execute("SELECT event_type FROM events WHERE position > ?", (head_before,))
            .fetchall()
        )
        assert rows == [], f"appended before the takeover was confirmed: {rows}"
        status, _, raw = second.request("POST", "/invocations", {"prompt": "mine?"})
        assert status == 503 and LEASE_BUSY_TEXT in raw.decode()


def test_a_job_that_cannot_be_resumed_is_recorded_and_recovery_goes_on(tmp_path: Path) -> None:
    """Fault 4: its promptFile is gone after the kill; the job ends error with the reason,
    the other cut-off job resumes, the lease is kept and new work runs."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "prompt.txt").write_text("slow from a file\n")
    with serve(workspace, ENV) as first:
        _, doomed = first.invoke({"promptFile": "prompt.txt", "id": "f1", "async": True})
        _, fine = first.invoke({"prompt": "slow other", "id": "f2", "async": True})
        assert doomed["status"] == fine["status"] == "accepted"
        kill_everything(first)
    (workspace / "prompt.txt").unlink()
    with serve(workspace, ENV) as second:
        _take_over(second, "f1")
        body = _poll(second, "f1", "error")
        assert body["result"].startswith("could not resume: promptFile prompt.txt")
        assert "No such file" in body["result"]
        assert _poll(second, "f2", "ok")["result"] == "done: slow other resumed=1\n"
        status, answer = second.invoke({"prompt": "new work"})
        assert (status, answer["status"]) == (200, "ok")
    assert _events_of(workspace, doomed["invocation"], "job.resume_failed") == 1


def test_a_paused_job_whose_server_died_is_suspended_and_continue_relaunches_it(
    tmp_path: Path,
) -> None:
    """Fault 5: the paused run is recorded job.suspended (its orphan process killed), no run
    of the old epoch is left to wait on, and continue starts a new, resumed run."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, ENV) as first:
        _, receipt = first.invoke({"prompt": "slow paused", "id": "p1", "async": True})
        job = receipt["invocation"]
        status, _, raw = first.request("POST", f"/v1/jobs/{job}/pause")
        assert status == 200 and json.loads(raw)["state"] == "paused"
        orphan = _db(workspace).execute("SELECT pid FROM runs").fetchall()[0][0]
        kill_everything(first)  # the paused runner's group outlives its server
    with serve(workspace, ENV, workers=2) as second:
        _take_over(second, "p1")
        status, _, raw = second.request("GET", f"/v1/jobs/{job}")
        assert json.loads(raw)["state"] == "suspended"
        assert _db(workspace).execute("SELECT count(*) FROM runs").fetchall() == [(0,)]
        with pytest.raises(ProcessLookupError):  # killed as an orphan, whole group
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                os.killpg(orphan, 0)
                time.sleep(0.05)
        status, _, raw = second.request("POST", f"/v1/jobs/{job}/continue")
        assert status == 200 and json.loads(raw)["state"] == "running"
        body = _poll(second, "p1", "ok")
        assert body["result"] == "done: slow paused resumed=1\n"
    kinds = [
        r[0]
        for r in _db(workspace).execute(
            "SELECT event_type FROM events WHERE stream_id = ? ORDER BY version", (f"job:{job}",)
        )
    ]
    assert kinds[:3] == ["job.accepted", "job.started", "job.paused"]
    assert "job.suspended" in kinds and kinds.count("job.started") == 2


def _rpc(server: Server, method: str, params: dict[str, Any]) -> tuple[int, bytes]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    status, _, raw = server.request("POST", "/", body, timeout=30)
    return status, raw


def _task_states(server: Server, method: str, task_id: str) -> list[str]:
    """The task's states as a caller using only ``method`` sees them: one per read, and the
    first and last of a subscription (which ends with the task, whatever the sync cap)."""
    if method == "GetTask":
        _, raw = _rpc(server, "GetTask", {"id": task_id})
        return [str(json.loads(raw)["result"]["status"]["state"])]
    if method == "ListTasks":
        _, raw = _rpc(server, "ListTasks", {})
        (task,) = json.loads(raw)["result"]["tasks"]
        return [str(task["status"]["state"])]
    _, raw = _rpc(server, "SubscribeToTask", {"id": task_id})
    text = raw.decode()
    frames = (
        [json.loads(text)]  # an error answer is plain JSON, not a stream
        if text.lstrip().startswith("{")
        else [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    )
    if not frames:
        return ["TASK_STATE_UNKNOWN"]
    if "error" in frames[-1]:  # a terminal task refuses a subscription
        return [str(frames[-1]["error"]["message"].rpartition(": ")[2])]
    ends = (frames[0]["result"], frames[-1]["result"])
    return [str((end.get("statusUpdate") or end["task"])["status"]["state"]) for end in ends]


@pytest.mark.parametrize("method", ["GetTask", "ListTasks", "SubscribeToTask"])
def test_a2a_reads_alone_wake_the_takeover_and_see_the_task_finish(
    tmp_path: Path, method: str
) -> None:
    """Fault 6: after a kill, a caller that only reads its task is what starts recovery."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {**ENV, "FOLDLINE_SYNC_WAIT_S": "2"}
    with serve(workspace, env) as first:
        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "slow a2a"}]}
        _, raw = _rpc(
            first, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}}
        )
        task_id = json.loads(raw)["result"]["task"]["id"]
        kill_everything(first)
    with serve(workspace, env) as second:
        seen = _task_states(second, method, task_id)
        deadline = time.monotonic() + 40
        while seen[-1] != "TASK_STATE_COMPLETED" and time.monotonic() < deadline:
            time.sleep(0.1)
            seen += _task_states(second, method, task_id)
        assert seen[0] == "TASK_STATE_WORKING"
        assert seen[-1] == "TASK_STATE_COMPLETED", seen[-5:]
        _, raw = _rpc(second, "GetTask", {"id": task_id})
        artifact = json.loads(raw)["result"]["artifacts"][0]["parts"][0]["text"]
        assert artifact == "done: slow a2a resumed=1\n"
