"""A front per session, anywhere (issue 40): fronts on one host pick their workers' ports
themselves and both serve; the host's state directory keeps each session directory's anchor
apart, so a new session on a host that served another starts, while a session whose log
vanished is still refused; a state directory the worker cannot traverse stops the boot (the
front's, and ``foldline serve``'s for its own) with one line naming it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.front.settings import session_key
from adapters.services.sandbox import as_user
from adapters.settings.config import RunUser
from tests.support.front import SID_A, SID_B, Front, front, place
from tests.support.server import ROOT, free_port

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="the front needs root (mounts)"),
]
NOT_TRAVERSABLE = "is not traversable by uid 1000 (mode 0700, owner root)"


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


def _front_boot(where_root: Path, state: Path) -> subprocess.CompletedProcess[bytes]:
    env = {
        "PATH": os.environ["PATH"],
        "FOLDLINE_SESSION_BASE": str(where_root / "base"),
        "FOLDLINE_STATE_DIR": str(state),
    }
    argv = ["front", "--workspace", str(where_root / "ws"), "--bind", f"127.0.0.1:{free_port()}"]
    return subprocess.run(
        [sys.executable, "-m", "adapters.cli", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_a_state_dir_the_worker_cannot_traverse_stops_the_fronts_boot_with_one_line() -> None:
    with place() as where:
        locked = where.root / "locked"
        locked.mkdir()
        os.chmod(locked, 0o700)  # root's, as a root shell's mkdir under umask 077 makes it
        for state in (locked, locked / "below"):
            done = _front_boot(where.root, state)
            said = done.stderr.decode().splitlines()
            print(f"exit {done.returncode}: {said}")
            assert done.returncode == 2, said
            assert said == [
                f"foldline: invalid configuration: state directory {state}"
                f" (FOLDLINE_STATE_DIR): {locked} {NOT_TRAVERSABLE}"
            ]
            assert done.stdout == b""  # no boot line: nothing was served
        os.chmod(locked, 0o711)  # traversable: the same front boots (stopped at once here)
        with front(where, {"FOLDLINE_STATE_DIR": str(locked / "below")}) as served:
            assert served.process.poll() is None


def test_a_state_dir_serve_cannot_enter_stops_its_boot_with_one_line() -> None:
    """``foldline serve`` as a user (the front's worker, a developer's) checks its own."""
    with place() as where:
        locked, workspace = where.root / "locked", where.root / "own-ws"
        locked.mkdir()
        os.chmod(locked, 0o700)
        workspace.mkdir()
        os.chown(workspace, 1000, 1000)
        state = locked / "state"
        serve = [sys.executable, "-m", "adapters.cli", "serve", "--workspace", str(workspace)]
        done = subprocess.run(
            as_user(RunUser(1000, 1000, "run"), serve),
            cwd=ROOT,
            env={
                "PATH": os.environ["PATH"],
                "FOLDLINE_STATE_DIR": str(state),
                "FOLDLINE_BIND": f"127.0.0.1:{free_port()}",
            },
            capture_output=True,
            timeout=60,
            check=False,
        )
        said = done.stderr.decode().splitlines()
        print(f"exit {done.returncode}: {said}")
        assert done.returncode == 2, said
        assert said == [
            f"foldline: invalid configuration: state directory {state} (FOLDLINE_STATE_DIR):"
            f" {locked} {NOT_TRAVERSABLE}"
        ]
        assert done.stdout == b""  # no boot line: nothing was served
