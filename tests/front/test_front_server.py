"""``foldline front`` as root over a tmpfs base: header rules, the base's mount, the session's
directory from the template, the worker's view (runs see their own session only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.front import SID_A, SID_B, front, place
from tests.support.server import ROOT

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="the front needs root (mounts)"),
]


def test_front_header_rules_and_paths_before_anything_is_mounted() -> None:
    with place() as where, front(where) as served:
        status, _, body = served.request("GET", "/ping", sid=None)
        assert status == 200 and json.loads(body)["status"] == "Healthy"
        assert served.request("POST", "/invocations", {"prompt": "x"}, sid=None)[0] == 400
        for bad in ("short", "." + "a" * 40, "a" * 256, "a" * 31 + "/b"):
            assert served.request("POST", "/invocations", {}, sid=bad)[0] == 400, bad
        assert served.request("GET", "/nope", sid=SID_A)[0] == 404
        assert served.request("GET", "/v1x", sid=SID_A)[0] == 404
        # Nothing is made before the base is mounted: 503 with the reason, retried later.
        status, _, body = served.request("POST", "/invocations", {"prompt": "x"})
        assert status == 503 and "is not a mount point" in json.loads(body)["error"]
        assert os.listdir(where.base) == []
        assert served.request("POST", "/invocations", {}, sid=SID_B)[0] == 409


def test_front_serves_once_the_base_is_mounted_and_keeps_its_session_id() -> None:
    with place() as where, front(where) as served:
        assert served.request("POST", "/invocations", {"prompt": "hi"})[0] == 503
        where.mount()
        status, answer = served.invoke({"prompt": "hello there"})
        assert status == 200 and answer["result"] == "echo: hello there\n", answer
        assert served.request("POST", "/invocations", {"prompt": "x"}, sid=SID_B)[0] == 409
        session = where.base / SID_A
        assert (session / "readme.txt").read_text() == "from the template\n"
        assert (session / ".foldline" / "foldline.db").read_bytes()[:15] == b"SQLite format 3"
        info = os.stat(session)
        assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (1000, 1000, 0o700)
        assert not [name for name in os.listdir(where.base) if name.startswith(".tmp-")]
        status, _, body = served.request("GET", "/.well-known/agent-card.json")
        assert status == 200 and "name" in json.loads(body)
        status, _, body = served.request("GET", "/ping", sid=None)
        assert status == 200 and json.loads(body)["status"] in ("Healthy", "HealthyBusy")


SNOOP = (
    "cat >/dev/null; echo uid=$(id -u); echo base=$(ls -A {base} 2>&1 | tr '\\n' ' ');"
    " for sid in {a} {b}; do cat {base}/$sid/readme.txt >/dev/null 2>&1"
    " && echo read=$sid; done; echo own=$(cat readme.txt); echo mine > mine-$(id -u).txt"
)


def test_front_two_sessions_get_two_directories_and_see_only_their_own() -> None:
    with place() as where:
        where.mount()
        runner = SNOOP.format(base=where.base, a=SID_A, b=SID_B)
        with (
            front(where, {"FOLDLINE_RUNNER": runner}) as one,
            front(where, {"FOLDLINE_RUNNER": runner}) as two,
        ):
            first = one.invoke({"prompt": "a"}, sid=SID_A)
            second = two.invoke({"prompt": "b"}, sid=SID_B)
            for status, answer in (first, second):
                assert status == 200, answer
                lines = dict(line.split("=", 1) for line in answer["result"].splitlines())
                assert lines == {"uid": "1000", "base": "", "own": "from the template"}
        assert sorted(os.listdir(where.base)) == sorted([".template", SID_A, SID_B])
        for sid in (SID_A, SID_B):
            assert (where.base / sid / "mine-1000.txt").read_text() == "mine\n"
        assert not (where.base / ".template" / "mine-1000.txt").exists()


def _foldline(command: str, workspace: Path, base: Path) -> subprocess.CompletedProcess[bytes]:
    """``foldline <command> --workspace <workspace>`` with ``base`` as the session base."""
    return subprocess.run(
        [sys.executable, "-m", "adapters.cli", command, "--workspace", str(workspace)],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "FOLDLINE_SESSION_BASE": str(base)},
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_front_refuses_a_base_overlapping_the_workspace(tmp_path: Path) -> None:
    done = _foldline("front", tmp_path / "b" / "w", tmp_path / "b")
    assert done.returncode != 0 and b"overlaps" in done.stderr


def test_serve_with_a_session_base_runs_the_front(tmp_path: Path) -> None:
    """One setting turns the image's ``foldline serve`` into the front."""
    done = _foldline("serve", tmp_path / "b", tmp_path / "b")
    assert done.returncode != 0 and b"overlaps the worker's workspace" in done.stderr
