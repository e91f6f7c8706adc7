"""kill -9 of a whole server mid-job: the next server takes over and the job finishes once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from adapters.config import LEASE_BUSY_TEXT
from engine import open_log
from engine.domain import MACHINES
from projections import default_projections
from tests.support.server import Server, serve

pytestmark = [pytest.mark.crash, pytest.mark.server]

RUNNER = (
    'read -r p; case "$p" in '
    'slow*) sleep 3; echo "done: $p resumed=$FOLDLINE_RESUMED";; '
    '*) echo "echo: $p";; esac'
)
ENV = {
    "FOLDLINE_RUNNER": RUNNER,
    "FOLDLINE_LEASE_RENEW_S": "0.5",
    "FOLDLINE_LEASE_STALE_S": "2",
    "FOLDLINE_LEASE_CONFIRM_S": "0.2",
}


def _db(workspace: Path) -> apsw.Connection:
    return apsw.Connection(str(workspace / ".foldline" / "foldline.db"))


def kill_everything(server: Server) -> None:
    """SIGKILL the master, its workers and every runner process group it started."""
    for (pid,) in (
        _db(server.workspace)
        .execute("SELECT pid FROM jobs WHERE state IN ('running', 'cancelling') AND pid > 1")
        .fetchall()
    ):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=10)


def _poll(server: Server, key: str, until: str, limit: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status, body = server.invoke({"get": key})
        assert status == 200
        if body["status"] == until:
            return body
        time.sleep(0.1)
    raise AssertionError(f"{key} never reached {until}: {body}")


def test_recovery_after_sigkill_finishes_the_cut_off_job_exactly_once(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, ENV, workers=2) as first:
        _, receipt = first.invoke({"prompt": "slow work", "id": "k1", "async": True})
        time.sleep(0.5)  # the run is under way
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
        time.sleep(0.5)
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


def test_kill_during_a_notify_hook_never_runs_it_twice(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {
        **ENV,
        "FOLDLINE_NOTIFY": 'echo start >> "$FOLDLINE_WORKSPACE/hook.log"; sleep 30',
        "FOLDLINE_NOTIFY_TIMEOUT_S": "2",
    }
    with serve(workspace, env) as first:
        _, body = first.invoke({"prompt": "notify me", "id": "n1"})
        deadline = time.monotonic() + 10
        pid = None
        while pid is None and time.monotonic() < deadline:
            pid = (
                _db(workspace)
                .execute("SELECT notify_pid FROM jobs WHERE job_id = ?", (body["invocation"],))
                .fetchall()[0][0]
            )
            time.sleep(0.05)
        assert pid is not None
        time.sleep(0.2)
        kill_everything(first)  # the server first: nobody may record the hook's end
        os.killpg(pid, signal.SIGKILL)  # then the hook's own group
    with serve(workspace, env) as second:
        deadline = time.monotonic() + 20
        status = 503
        while status == 503 and time.monotonic() < deadline:  # until the stale lease is taken
            status, answer = second.invoke({"prompt": "another"})
            time.sleep(0.1)
        assert status == 200 and answer["status"] == "ok"
        time.sleep(0.5)
    lines = (workspace / "hook.log").read_text().splitlines()
    assert lines.count("start") == 2  # one hook for each job: the first was never re-run
    starts = (
        _db(workspace)
        .execute(
            "SELECT count(*) FROM events WHERE stream_id = ? AND event_type = 'job.notify_started'",
            (f"job:{body['invocation']}",),
        )
        .fetchall()
    )
    ends = (
        _db(workspace)
        .execute(
            "SELECT count(*) FROM events"
            " WHERE stream_id = ? AND event_type = 'job.notify_finished'",
            (f"job:{body['invocation']}",),
        )
        .fetchall()
    )
    assert (starts, ends) == ([(1,)], [(0,)])
