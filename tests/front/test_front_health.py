"""The front's ``/ping``: the worker's answer once it serves, ``HealthyBusy`` when the worker
does not answer in time (a loop blocked on file IO must not be reaped mid-run) and while the
front runs a notify hook; its stamp moves only when that status changes."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.front import SID_A, Front, children, front, held_hook, place, wait_until

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="the front needs root (mounts)"),
]
# Waits (bounded) for the test's go-ahead file in the workspace, then answers.
GATED = (
    'cat >/dev/null; i=0; while [ ! -e go ] && [ "$i" -lt 600 ]; do sleep 0.05;'
    " i=$((i + 1)); done; echo done"
)


def _status(served: Front) -> str:
    return _ping(served)[0]


def _ping(served: Front) -> tuple[str, int]:
    said = json.loads(served.request("GET", "/ping", sid=None)[2])
    return str(said["status"]), int(said["time_of_last_update"])


def _worker_status(served: Front) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", served.worker_port, timeout=10)
    try:
        conn.request("GET", "/ping")
        return str(json.loads(conn.getresponse().read())["status"])
    finally:
        conn.close()


def _tree(pid: int) -> list[int]:
    """``pid``'s descendants (the worker's chain execs, so they are its gunicorn)."""
    return [p for child in children(pid) for p in (child, *_tree(child))]


def _signal(pid: int, sig: int) -> None:
    # A short-lived process of the tree (a hook's child) may end between the listing and
    # the signal: an ended process needs no stopping.
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


@contextlib.contextmanager
def _stopped(pids: list[int]) -> Iterator[None]:
    for pid in pids:
        _signal(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            _signal(pid, signal.SIGCONT)


def test_front_ping_is_the_workers_answer_and_busy_when_it_does_not_answer() -> None:
    with place() as where:
        where.mount()
        env = {"FOLDLINE_RUNNER": GATED, "FOLDLINE_FRONT_PING_S": "0.5"}
        with front(where, env) as served:
            assert _status(served) == "Healthy"  # no worker yet
            status, receipt = served.invoke({"prompt": "go", "async": True})
            assert status == 200, receipt
            assert _worker_status(served) == "HealthyBusy"  # the job runs
            assert _status(served) == "HealthyBusy"
            with _stopped(_tree(served.process.pid)):  # a worker that cannot answer
                assert _status(served) == "HealthyBusy"
            (where.base / SID_A / "go").write_text("")
            wait_until(lambda: _worker_status(served) == "Healthy", what="job done")
            assert _status(served) == "Healthy"
            with _stopped(_tree(served.process.pid)):
                assert _status(served) == "HealthyBusy"  # idle, but silent: not reapable
            assert _status(served) == "Healthy"


def test_front_ping_is_busy_while_its_notify_hook_runs() -> None:
    with place() as where:
        where.mount()
        out = where.root / "hook"
        out.mkdir()
        env = {"FOLDLINE_RUNNER": "cat >/dev/null; echo hi", "FOLDLINE_NOTIFY": held_hook()}
        with front(where, {**env, "OUT": str(out)}) as served:
            status, answer = served.invoke({"prompt": "go"})
            assert status == 200 and answer["status"] == "ok", answer
            wait_until(lambda: (out / "started").exists(), what="hook started")
            with _stopped(_tree(served.process.pid)):  # the front's own answer, not the worker's
                assert _status(served) == "HealthyBusy"
            (out / "go").write_text("")
            wait_until(lambda: _status(served) == "Healthy", what="hook ended")


def test_front_ping_stamp_stays_while_busy_across_a_notify_hook_and_moves_at_idle() -> None:
    """A job, then its hook: ``HealthyBusy`` throughout, first from the worker, then from the
    front; the stamp is the one from when it turned busy until it turns ``Healthy``."""
    with place() as where:
        where.mount()
        out = where.root / "hook"
        out.mkdir()
        env = {"FOLDLINE_RUNNER": GATED, "FOLDLINE_NOTIFY": held_hook(), "OUT": str(out)}
        with front(where, env) as served:
            answers: list[Any] = []
            call = threading.Thread(
                target=lambda: answers.append(served.invoke({"prompt": "go"})), daemon=True
            )
            call.start()
            wait_until(lambda: _status(served) == "HealthyBusy", what="the job running")
            _, since = _ping(served)
            # Stamps are whole seconds: past the next one, a restamp could not go unseen.
            wait_until(lambda: time.time() >= since + 1.2, what="a second passed")
            assert _ping(served) == ("HealthyBusy", since)
            (where.base / SID_A / "go").write_text("")
            call.join(timeout=60)
            assert answers and answers[0][0] == 200, answers
            wait_until(lambda: (out / "started").exists(), what="hook started")
            assert _ping(served) == ("HealthyBusy", since)  # the hook's start: no restamp
            wait_until(lambda: time.time() >= since + 2.2, what="another second passed")
            assert _ping(served) == ("HealthyBusy", since)
            (out / "go").write_text("")
            wait_until(lambda: _status(served) == "Healthy", what="the hook ended")
            _, at = _ping(served)
            print(f"busy since {since}, idle since {at}")
            assert at >= since + 2  # moved with the status, not before
            assert _ping(served) == ("Healthy", at)
