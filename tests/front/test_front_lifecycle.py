"""The front's end follows its worker's: SIGTERM stops the worker gracefully (the lease is
released), ``kill -9`` of the worker ends the front, and a new front on the same session id
takes over and finishes the cut-off job once."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import apsw
import pytest

from tests.support.front import SID_A, front, held_hook, place, wait_until, worker_of
from tests.support.server import RECOVERY_ENV

pytestmark = [
    pytest.mark.server,
    pytest.mark.crash,
    pytest.mark.skipif(os.geteuid() != 0, reason="the front needs root (mounts)"),
]


def _db(session: Path) -> apsw.Connection:
    return apsw.Connection(str(session / ".foldline" / "foldline.db"))


def _events(session: Path, stream: str, kind: str) -> int:
    rows = (
        _db(session)
        .execute(
            "SELECT count(*) FROM events WHERE stream_id = ? AND event_type = ?", (stream, kind)
        )
        .fetchall()
    )
    return int(rows[0][0])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_front_sigterm_stops_the_worker_which_releases_the_lease(signum: int) -> None:
    with place() as where:
        where.mount()
        with front(where) as served:
            assert served.invoke({"prompt": "hi"})[0] == 200
            worker = worker_of(served)
            os.kill(served.process.pid, signum)
            assert served.process.wait(timeout=40) == 0
            assert not os.path.exists(f"/proc/{worker}")
            assert "foldline front: exiting 0" in served.output()
        assert _events(where.base / SID_A, "lease:workspace", "lease.released") == 1


@pytest.mark.slow
def test_front_ends_when_its_worker_is_killed_and_a_new_front_finishes_the_job_once() -> None:
    with place() as where:
        where.mount()
        session = where.base / SID_A
        with front(where, RECOVERY_ENV) as first:
            status, receipt = first.invoke({"prompt": "slow work", "id": "k1", "async": True})
            assert status == 200 and receipt["status"] == "accepted", receipt
            runs = (
                _db(session)
                .execute("SELECT pid FROM jobs WHERE state = 'running' AND pid > 1")
                .fetchall()
            )
            os.kill(worker_of(first), signal.SIGKILL)
            assert first.process.wait(timeout=30) == 1  # a signal is an exit of 1
            for (pid,) in runs:  # the cut-off run's own group, as a dead microVM's would be
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            assert "the worker exited (-9)" in first.output()
        with front(where, RECOVERY_ENV) as second:
            deadline = time.monotonic() + 60
            body: dict[str, object] = {}
            while body.get("status") != "ok":
                assert time.monotonic() < deadline, (body, second.output()[-3000:])
                status, body = second.invoke({"get": "k1"})
                if status != 200:  # the old lease until it is stale: 503, retried
                    body = {}
                    time.sleep(0.2)
                elif body["status"] != "ok":
                    time.sleep(0.2)
            assert body["invocation"] == receipt["invocation"]
            assert body["result"] == "done: slow work resumed=1\n"
        stream = f"job:{receipt['invocation']}"
        assert _events(session, stream, "job.finished") == 1
        assert _events(session, stream, "job.started") == 2


def test_front_stop_waits_for_its_running_notify_hook() -> None:
    """The worker's graceful stop ends it; the front stays until its hook is done."""
    with place() as where:
        where.mount()
        out = where.root / "hook"
        out.mkdir()
        hook = held_hook(then='echo finished > "$OUT/ended"')
        env = {"FOLDLINE_RUNNER": "cat >/dev/null; echo hi", "FOLDLINE_NOTIFY": hook}
        with front(where, {**env, "OUT": str(out)}) as served:
            status, answer = served.invoke({"prompt": "go"})
            assert status == 200 and answer["status"] == "ok", answer
            wait_until(lambda: (out / "started").exists(), what="hook started")
            worker = worker_of(served)
            os.kill(served.process.pid, signal.SIGTERM)
            wait_until(lambda: not os.path.exists(f"/proc/{worker}"), what="the worker's end")
            wait_until(lambda: "notify hook(s)" in served.output(), what="the front waiting")
            assert served.process.poll() is None, served.output()
            assert not (out / "ended").exists()
            (out / "go").write_text("")
            assert served.process.wait(timeout=30) == 0, served.output()
            assert (out / "ended").read_text() == "finished\n"
        assert _events(where.base / SID_A, "lease:workspace", "lease.released") == 1
