"""A front per session, anywhere (issue 40): fronts on one host pick their workers' ports
themselves and both serve; the host's state directory keeps each session directory's anchor
apart, so a new session on a host that served another starts, while a session whose log
vanished is still refused."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from adapters.front.settings import session_key
from tests.support.front import SID_A, SID_B, Front, front, place

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="the front needs root (mounts)"),
]


def _anchors(state: Path, session: Path) -> list[Path]:
    return list((state / "front-worker" / session_key(session) / "state" / "anchors").glob("*"))


def _worker_line(served: Front) -> str:
    return next(line for line in served.output().splitlines() if "'s worker on " in line)


def test_two_fronts_on_one_host_pick_their_workers_ports_and_both_serve() -> None:
    with place() as where:
        where.mount()
        # Neither sets FOLDLINE_WORKER_PORT, and they share the host's state directory.
        with front(where) as one, front(where) as two:
            first = one.invoke({"prompt": "from a"}, sid=SID_A)
            second = two.invoke({"prompt": "from b"}, sid=SID_B)
            for served, (status, answer) in ((one, first), (two, second)):
                print(f"front :{served.port}, worker :{served.worker_port}: {status} {answer}")
                print(f"  {_worker_line(served)}")
            assert first[0] == 200 and first[1]["result"] == "echo: from a\n", first
            assert second[0] == 200 and second[1]["result"] == "echo: from b\n", second
            assert one.worker_port != two.worker_port
            for served, sid in ((one, SID_A), (two, SID_B)):
                assert f"{sid}'s worker on 127.0.0.1:{served.worker_port}," in served.output()
        for sid in (SID_A, SID_B):  # each session's own anchor
            assert _anchors(where.state, where.base / sid), sorted(where.state.rglob("*"))


def test_a_new_session_starts_on_a_host_that_served_another_and_a_lost_log_is_refused() -> None:
    with place() as where:
        where.mount()
        with front(where) as first:
            status, answer = first.invoke({"prompt": "one"}, sid=SID_A)
            assert status == 200 and answer["status"] == "ok", answer
        # The same host, its state directory and the worker's view (/workspace) as before,
        # another session: its own log, not refused for the first session's anchor.
        with front(where) as second:
            status, answer = second.invoke({"prompt": "two"}, sid=SID_B)
            print(f"second session on the host: {status} {answer}")
            assert status == 200 and answer["result"] == "echo: two\n", answer
        # The first session's log vanishes: its anchor still catches it.
        shutil.rmtree(where.base / SID_A / ".foldline")
        with front(where) as third:
            status, _, body = third.request("POST", "/invocations", {"prompt": "x"}, sid=SID_A)
            print(f"first session again, its log gone: {status} {body.decode()}")
            assert status == 503 and b"refusing to start a new log" in body, body
            assert not (where.base / SID_A / ".foldline" / "foldline.db").exists()
