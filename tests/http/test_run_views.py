"""What a run may write, and that runs are kept apart (ADR 0064), on real servers: a root one
(runs as the run user, ``namespace``) and one that is not root (``userns``, as under the front).

A read-only agent's writes are refused by the kernel (EROFS) and the workspace stays as it
was; ``FOLDLINE_ACCESS`` sets the default agent's level; a run cannot read another live run's
environment, open files or home, nor stop or trace it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.http.test_log_guard import AS_A_USER
from tests.support.cli import foldline
from tests.support.server import OPERATOR_TOKEN, Server, serve

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="runs as another user need a root test"),
]

# Each write a read-only run tries, with the last line of what it was told.
READER = (
    "cat >/dev/null;"
    ' say() { printf "%s: %s\\n" "$1" "$(printf "%s" "$2" | tail -n 1)"; };'
    ' say echo "$( { echo x > f; } 2>&1 )";'
    ' say git-commit "$(git -c user.name=r -c user.email=r@localhost commit -q --allow-empty'
    ' -m ro 2>&1)";'
    ' say rm-rf "$(rm -rf src 2>&1)";'
    ' echo h > "$HOME/h" && echo home: written;'
    ' echo t > "$TMPDIR/t" && echo tmp: written'
)
# Holds a file of its home open, and waits.
VICTIM = 'cat >/dev/null; echo secret > "$HOME/secret"; exec 7<"$HOME/secret"; exec sleep 60'
# Given pids of another live run, tries to read and stop it.
PROBE = (
    "read -r pids;"
    " for pid in $pids; do"
    ' echo "environ $pid: $(head -c 300 /proc/$pid/environ 2>&1 | tr "\\0" " ")";'
    ' echo "fd $pid: $(ls /proc/$pid/fd 2>&1)";'
    ' echo "kill-STOP $pid: $(kill -STOP $pid 2>&1 && echo stopped)";'
    " echo \"ptrace $pid: $(python3 -c 'import ctypes, os, sys;"
    " libc = ctypes.CDLL(None, use_errno=True);"
    " print(libc.ptrace(16, int(sys.argv[1]), 0, 0), os.strerror(ctypes.get_errno()))'"
    ' $pid 2>&1)"; done;'
    ' echo "home: $(cat "$HOME/secret" 2>&1)"'
)


def _git(workspace: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(workspace), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@pytest.fixture(params=["namespace", "userns"])
def place(request: pytest.FixtureRequest) -> Iterator[tuple[Path, dict[str, str], list[str]]]:
    """A git workspace with ``src/`` committed, and how to serve it in the isolation asked."""
    base = Path(tempfile.mkdtemp(prefix="foldline-views-"))
    os.chmod(base, 0o711)
    workspace = base / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "a.txt").write_text("a\n")
    _git(workspace, "init", "-q")
    _git(workspace, "add", ".")
    _git(workspace, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qm", "a")
    agents = base / "agents.toml"
    agents.write_text(
        f'[agents.reader]\ncommand = {json.dumps(READER)}\nmode = "read-only"\n'
        f"[agents.victim]\ncommand = {json.dumps(VICTIM)}\n"
        f"[agents.prober]\ncommand = {json.dumps(PROBE)}\n"
    )
    env = {"FOLDLINE_AGENTS_FILE": str(agents), "FOLDLINE_RUNNER": "cat"}
    prefix: list[str] = []
    if request.param == "namespace":
        env.update(FOLDLINE_RUN_USER="1000:1000", FOLDLINE_RUN_ISOLATION="namespace")
    else:  # the server is uid 1000 itself: its runs get a user, pid and mount namespace
        state = base / "ws.state"
        state.mkdir()
        subprocess.run(["chown", "-R", "1000:1000", str(workspace), str(state)], check=True)
        env.update(FOLDLINE_RUN_USER="", FOLDLINE_RUN_ISOLATION="userns")
        prefix = AS_A_USER
    yield workspace, env, prefix
    shutil.rmtree(base, ignore_errors=True)


def test_a_read_only_agent_is_refused_every_write_by_the_kernel(
    place: tuple[Path, dict[str, str], list[str]],
) -> None:
    workspace, env, prefix = place
    head = _git(workspace, "rev-parse", "HEAD")
    with serve(workspace, env, prefix=prefix) as server:
        status, body = server.invoke({"prompt": "try", "agent": "reader"}, timeout=60)
        assert status == 200, body
        said = dict(line.split(": ", 1) for line in body["result"].splitlines())
        print(body["result"])  # the closing note quotes the refusals
        for attempt in ("echo", "git-commit", "rm-rf"):
            assert "Read-only file system" in said[attempt], said
        assert said["home"] == said["tmp"] == "written", said
    # Clean but for the server's own log directory (never the run's doing).
    assert _git(workspace, "status", "--porcelain", "--", ".", ":!.foldline") == ""
    assert _git(workspace, "rev-parse", "HEAD") == head
    assert (workspace / "src" / "a.txt").read_text() == "a\n"
    assert not (workspace / "f").exists()


def _job(server: Server, job_id: str) -> dict[str, Any]:
    status, _, raw = server.request(
        "GET", f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    )
    assert status == 200, raw
    return dict(json.loads(raw))


def _descendants(pid: int) -> list[int]:
    """``pid``'s processes below it, nearest first (the run's own is the last)."""
    found, todo = [], [pid]
    while todo and len(found) < 20:
        parent = todo.pop(0)
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        found += [int(child) for child in children]
        todo += [int(child) for child in children]
    return found


def _name_of(pid: int) -> str:
    """``pid``'s command name, or "" once it has exited (a step of the run's start can)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def test_a_run_cannot_read_stop_or_trace_another_live_run(
    place: tuple[Path, dict[str, str], list[str]],
) -> None:
    workspace, env, prefix = place
    with serve(workspace, env, prefix=prefix) as server:
        status, victim = server.invoke({"prompt": "x", "agent": "victim", "async": True})
        assert status in (200, 202), victim
        job_id, deadline = victim["invocation"], time.monotonic() + 30
        pids: list[int] = []
        while time.monotonic() < deadline:  # the victim's sleep is up, its file held open
            recorded = _job(server, job_id).get("pid")
            pids = _descendants(int(recorded)) if recorded else []
            if pids and _name_of(pids[-1]) == "sleep":
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the victim's run never got to its sleep: {pids}")
        target = pids[-1]
        environ_before = Path(f"/proc/{target}/environ").read_bytes()
        assert b"FOLDLINE_RUN_TOKEN=" in environ_before
        status, body = server.invoke({"prompt": f"{recorded} {target}", "agent": "prober"})
        assert status == 200, body
        result = body["result"]
        print(result)  # the closing note quotes the probes
        for pid in (recorded, target):
            lines = {line.split(":", 1)[0]: line for line in result.splitlines()}
            assert "No such file or directory" in lines[f"environ {pid}"], result
            assert "No such file or directory" in lines[f"fd {pid}"], result
            assert "No such process" in lines[f"kill-STOP {pid}"], result
            assert "-1 No such process" in lines[f"ptrace {pid}"], result
        assert "FOLDLINE_RUN_TOKEN" not in result and "stopped" not in result
        assert "home: cat:" in result and "No such file or directory" in result
        # The other run goes on as it was: sleeping, not stopped, its job still running.
        assert _state_of(target) == "S"
        assert Path(f"/proc/{target}/environ").read_bytes() == environ_before
        assert _job(server, job_id)["state"] == "running"


@pytest.mark.parametrize("access", ["workspace", "readonly", "full"])
def test_foldline_access_sets_what_the_default_agents_runs_write(access: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="foldline-access-"))
    try:
        os.chmod(base, 0o711)
        workspace, outside = base / "ws", base / "outside"
        workspace.mkdir()
        outside.mkdir()
        os.chown(outside, 1000, 1000)  # the run user's, outside the workspace
        runner = (
            "cat >/dev/null;"
            ' echo "workspace: $( { echo w > in.txt; } 2>&1 || true)";'
            f' echo "outside: $( {{ echo o > {outside}/out.txt; }} 2>&1 || true)"'
        )
        env = {
            "FOLDLINE_RUN_USER": "1000:1000",
            "FOLDLINE_RUNNER": runner,
            "FOLDLINE_ACCESS": access,
        }
        with serve(workspace, env) as server:
            status, body = server.invoke({"prompt": "go"}, timeout=60)
            assert status == 200, body
        said = dict(line.split(": ", 1) for line in body["result"].splitlines())
        wrote = {"workspace": (workspace / "in.txt").exists(), "outside": (outside / "out.txt")}
        assert wrote["workspace"] == (access != "readonly"), said
        assert (outside / "out.txt").exists() == (access == "full"), said
        refused = [where for where, text in said.items() if "Read-only file system" in text]
        assert refused == {"workspace": ["outside"], "readonly": ["workspace", "outside"]}.get(
            access, []
        ), said
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (
            {"FOLDLINE_RUN_ISOLATION": "modes"},
            "FOLDLINE_RUN_ISOLATION=modes: without a mount and pid namespace per run",
        ),
        ({"FOLDLINE_ACCESS": "write"}, "FOLDLINE_ACCESS='write': expected workspace, readonly"),
    ],
)
def test_a_server_that_cannot_keep_its_runs_apart_does_not_start(
    tmp_path: Path, setting: dict[str, str], said: str
) -> None:
    """``modes`` (no namespace per run) and an unknown access level are boot errors of one
    line, never a server whose runs share what they should not."""
    env = {
        **os.environ,
        "FOLDLINE_RUN_USER": "1000:1000",
        "FOLDLINE_STATE_DIR": str(tmp_path / "state"),
        **setting,
    }
    (tmp_path / "ws").mkdir()
    refused = foldline(
        "serve", "--workspace", str(tmp_path / "ws"), "--bind", "127.0.0.1:1", env=env
    )
    print(refused.stderr)
    assert refused.returncode != 0
    (line,) = [text for text in refused.stderr.splitlines() if "invalid configuration" in text]
    assert said in line, refused.stderr
