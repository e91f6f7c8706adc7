"""The front's ``/ping``: the worker's answer once it serves, ``HealthyBusy`` when the worker
does not answer in time (a loop blocked on file IO must not be reaped mid-run) and while the
front runs a notify hook."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
from collections.abc import Iterator

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
    return str(json.loads(served.request("GET", "/ping", sid=None)[2])["status"])


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
