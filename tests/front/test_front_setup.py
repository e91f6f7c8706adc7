"""The first request's set-up under stress: fronts racing on one id end with one complete
directory, a failed build is a 500 the next request retries, a failed view setup and a worker
never ready are 503 for good (and no worker serves)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from tests.support.front import SID_A, children, front, place, wait_until
from tests.support.server import ROOT

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="the front needs root (mounts)"),
]
# One build per process, released by a line on stdin; each stops before its rename (says
# "copied", waits for a second line), so every copy is whole before any is renamed in.
BUILD = """
import sys
from pathlib import Path
from adapters.settings.config import RunUser
from adapters.front import session_dir
real, said = session_dir.rename_noreplace, []
def rename(source, target):
    print("copied", flush=True)
    sys.stdin.readline()
    try:
        real(source, target)
    except FileExistsError:
        said.append("lost")
        raise
    said.append("won")
session_dir.rename_noreplace = rename
sys.stdin.readline()
made = session_dir.ensure(Path(sys.argv[1]), sys.argv[2], RunUser(1000, 1000, "run"))
print(said[0] if said else "found", sorted(p.name for p in made.iterdir()).__len__())
"""


def test_builds_racing_on_one_id_end_with_one_complete_directory() -> None:
    with place() as where:
        where.mount()
        for n in range(400):
            (where.base / ".template" / f"f{n:03}.txt").write_text(f"{n}\n")
        builds = [
            subprocess.Popen(
                [sys.executable, "-c", BUILD, str(where.base), SID_A],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for build in builds:
            assert build.stdin is not None and build.stdout is not None
            build.stdin.write("go\n")
            build.stdin.flush()
        for build in builds:  # four whole copies, none renamed in yet
            assert build.stdout is not None
            assert build.stdout.readline() == "copied\n"
        for build in builds:
            assert build.stdin is not None
            build.stdin.write("go\n")
            build.stdin.flush()
        ends = [build.communicate(timeout=60)[0].split() for build in builds]
        assert all(build.returncode == 0 for build in builds), ends
        outcomes = sorted(end[0] for end in ends)
        assert outcomes == ["lost", "lost", "lost", "won"], outcomes
        assert all(end[1] == "401" for end in ends), ends  # every caller saw it complete
        assert sorted(os.listdir(where.base)) == sorted([".template", SID_A])
        assert len(os.listdir(where.base / SID_A)) == 401  # 400 files and the readme


def test_two_fronts_on_one_id_sent_at_once_share_one_directory() -> None:
    with place() as where:
        where.mount()
        with front(where) as one, front(where) as two:
            answers: list[int] = []
            threads = [
                threading.Thread(
                    target=lambda s=served: answers.append(  # type: ignore[misc]
                        s.request("GET", "/.well-known/agent-card.json")[0]
                    )
                )
                for served in (one, two)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=90)
            assert sorted(answers) == [200, 200], answers
        assert sorted(os.listdir(where.base)) == sorted([".template", SID_A])
        assert (where.base / SID_A / "readme.txt").read_text() == "from the template\n"


def test_a_failed_build_is_a_500_and_the_next_request_retries() -> None:
    with place() as where:
        where.mount()
        plug = where.base / ".template" / "plug.sock"  # a socket: no copy of it can be made
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(plug))
        listener.close()
        with front(where) as served:
            status, _, body = served.request("GET", "/.well-known/agent-card.json")
            assert status == 500, body
            assert "could not be made" in json.loads(body)["error"]
            assert sorted(os.listdir(where.base)) == [".template"]  # no half copy left
            assert not children(served.process.pid)  # no worker for a session without a directory
            plug.unlink()
            assert served.request("GET", "/.well-known/agent-card.json")[0] == 200
        assert (where.base / SID_A / "readme.txt").read_text() == "from the template\n"


def test_a_failed_view_setup_is_503_for_good_and_no_worker_starts() -> None:
    with place() as where:
        where.mount()
        for _ in range(5):  # six layers: five rounds of umount -l leave one
            subprocess.run(["mount", "-t", "tmpfs", "layer", where.base], check=True)
        try:
            with front(where) as served:
                for _ in range(3):
                    status, _, body = served.request("POST", "/invocations", {"prompt": "x"})
                    error = json.loads(body)["error"]
                    assert status == 503, body
                    assert "view setup failed" in error, error
                    assert "still has 1 mount(s) after 5 x umount -l" in error, error
                    assert not children(served.process.pid)
                assert served.process.poll() is None
                with pytest.raises(ConnectionRefusedError):  # nothing ever listened there
                    socket.create_connection(("127.0.0.1", served.worker_port), timeout=5)
        finally:
            for _ in range(5):
                subprocess.run(["umount", "-l", where.base], capture_output=True, check=False)


def test_a_workspace_path_that_cannot_be_made_fails_the_view_closed() -> None:
    with place() as where:
        where.mount()
        where.ws.write_text("a file where the workspace would be bound\n")
        with front(where) as served:
            for _ in range(2):
                status, _, body = served.request("POST", "/invocations", {"prompt": "x"})
                error = json.loads(body)["error"]
                assert status == 503 and "view setup failed" in error, body
                assert f"mkdir -p {where.ws}" in error, error
                assert not children(served.process.pid)
            assert where.ws.read_text().startswith("a file")  # the front's view is unchanged
            assert served.process.poll() is None


def test_a_worker_not_ready_in_time_is_503_for_good() -> None:
    with place() as where:
        where.mount()
        # No worker is up 0.05 s after its start: the bound is the test's knob, 30 s by default.
        with front(where, {"FOLDLINE_FRONT_READY_S": "0.05"}) as served:
            for _ in range(2):
                status, _, body = served.request("POST", "/invocations", {"prompt": "x"})
                assert status == 503, body
                assert "not ready within 0.05 s" in json.loads(body)["error"]
            wait_until(lambda: not children(served.process.pid), what="the worker killed")
            assert served.process.poll() is None  # the front stays, answering 503
            status, _, body = served.request("GET", "/ping", sid=None)
            assert json.loads(body)["status"] == "Healthy"
