"""A log deleted under a running server, as a run with the server's own uid can do it (a server
that is not root, or ``FOLDLINE_RUN_USER=root``): writes stop with ``log_missing`` instead of
going into an unlinked file, and a restart refuses to put an empty log in its place unless told
to with ``--new-log``, which is recorded (ADR 0029)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import foldline
from tests.support.server import Server, serve

pytestmark = pytest.mark.server

RUNNER = 'read -r p; case "$p" in wipe) rm -rf .foldline;; esac; echo "done: $p"'


def _anchor(workspace: Path) -> Path:
    (found,) = (workspace.parent / f"{workspace.name}.state" / "anchors").glob("*.json")
    return found


def _stderr_after_stop(server: Server) -> str:
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=30)
    assert server.process.stderr is not None
    return server.process.stderr.read().decode()


def _lease_events(server: Server) -> list[dict[str, Any]]:
    status, _, raw = server.request("GET", "/v1/streams/lease:workspace/events")
    assert status == 200, raw
    return list(json.loads(raw)["events"])


# A server that is not root: uid 1000, able to read the virtualenv wherever it lies (as root's
# tests' own checkout may be behind a 0700 home) and nothing more.
AS_A_USER = [
    "setpriv",
    "--reuid=1000",
    "--regid=1000",
    "--clear-groups",
    "--inh-caps=+dac_read_search",
    "--ambient-caps=+dac_read_search",
    "--",
]


@pytest.fixture(params=["runs-as-the-server", "server-not-root"])
def started(request: pytest.FixtureRequest) -> Iterator[tuple[Path, dict[str, Any], list[str]]]:
    """A workspace and how to serve it: as root with runs kept at root's uid, or as a user."""
    base = Path(tempfile.mkdtemp(prefix="foldline-guard-"))
    os.chmod(base, 0o711)
    workspace = base / "ws"
    workspace.mkdir()
    env: dict[str, Any] = {"FOLDLINE_RUNNER": RUNNER}
    prefix: list[str] = []
    if request.param == "server-not-root":
        if os.geteuid() != 0:
            prefix = []  # the suite itself is not root: this is that case already
        else:
            state = base / "ws.state"
            state.mkdir()
            for path in (workspace, state):
                os.chown(path, 1000, 1000)
            env["FOLDLINE_RUN_USER"] = ""  # a server that is not root cannot switch
            prefix = AS_A_USER
    yield workspace, env, prefix
    shutil.rmtree(base, ignore_errors=True)


def test_a_log_deleted_under_a_running_server_stops_writes_and_no_empty_log_replaces_it(
    started: tuple[Path, dict[str, Any], list[str]],
) -> None:
    workspace, env, prefix = started
    with serve(workspace, env, prefix=prefix) as server:
        server_uid = Path(f"/proc/{server.process.pid}").stat().st_uid
        assert server_uid == (1000 if prefix else os.geteuid())
        sessions = []
        for n in range(4):
            status, body = server.invoke({"prompt": f"job {n}"})
            assert (status, body["result"]) == (200, f"done: job {n}\n")
            sessions.append(body["session"])
        # The run deletes the log's directory; its own end can no longer be recorded, and the
        # caller waiting for it hears why instead of waiting for a commit that cannot come.
        status, body = server.invoke({"prompt": "wipe"}, timeout=60)
        assert (status, body["code"]) == (503, "log_missing"), body
        assert "is gone" in body["error"]
        assert not (workspace / ".foldline").exists()
        status, body = server.invoke({"prompt": "after"})
        assert (status, body["code"]) == (503, "log_missing")
        status, _, raw = server.request(
            "POST",
            f"/v1/sessions/{sessions[0]}/taint",
            b'{"reason": "checked"}',
            {"Content-Type": "application/json"},
        )
        assert status == 503 and json.loads(raw)["error"]["code"] == "log_missing"
        metrics = server.request("GET", "/metrics")[2].decode()
        assert "foldline_log_missing{" in metrics and metrics.split("foldline_log_missing{")[1]
        assert metrics.split("foldline_log_missing{")[1].split("\n")[0].endswith(" 1")
        assert server.request("GET", "/ping")[0] == 200
        stderr = _stderr_after_stop(server)
    assert "no more writes are taken" in stderr
    assert not (workspace / ".foldline").exists()  # nothing made a new, empty log meanwhile

    with serve(workspace, env, prefix=prefix) as server:
        status, body = server.invoke({"prompt": "again"})
        assert (status, body["code"]) == (503, "log_missing"), body
        assert "refusing to start a new log" in body["error"] and "--new-log" in body["error"]
        metrics = server.request("GET", "/metrics")[2].decode()
        assert metrics.split("foldline_log_missing{")[1].split("\n")[0].endswith(" 1")
    assert not (workspace / ".foldline" / "foldline.db").exists()


def test_new_log_starts_anew_and_records_what_it_lost(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"FOLDLINE_RUNNER": RUNNER}
    with serve(workspace, env) as server:
        for n in range(3):
            assert server.invoke({"prompt": f"job {n}"})[0] == 200
    kept = tmp_path / "lost-anchor.json"
    shutil.copy(_anchor(workspace), kept)
    lost = json.loads(kept.read_text())
    assert lost["format"] == "foldline-anchor/1" and lost["position"] > 3
    # An auditor holds the old log against the anchor: it extends it.
    old = tmp_path / "old.db"
    shutil.copy(workspace / ".foldline" / "foldline.db", old)
    checked = foldline("verify", str(old), "--against", str(kept))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)["extends_checkpoint"] is True
    shutil.rmtree(workspace / ".foldline")

    with serve(workspace, env, args=["--new-log"]) as server:
        status, body = server.invoke({"prompt": "fresh"})
        assert (status, body["result"]) == (200, "done: fresh\n"), body
        (new_log,) = [e for e in _lease_events(server) if e["event_type"] == "lease.new_log"]
        recorded = new_log["event"]["lost"]
        fields = ("db", "device", "inode", "position", "hash", "recorded_at")
        assert {key: recorded[key] for key in fields} == {key: lost[key] for key in fields}
    # The anchor now follows the new log; the new log does not extend the lost anchor.
    assert json.loads(_anchor(workspace).read_text())["hash"] != lost["hash"]
    db = workspace / ".foldline" / "foldline.db"
    refused = foldline("verify", str(db), "--against", str(kept))
    assert refused.returncode == 1 and "checkpoint_mismatch" in refused.stdout
    follows = foldline("verify", str(db), "--against", str(_anchor(workspace)))
    assert follows.returncode == 0, follows.stdout + follows.stderr

    # --new-log replaces the anchor the server found at boot, and only that one: this log,
    # deleted too, is refused by a fresh worker of the same server (gunicorn's respawn after
    # a kill -9), although the server was started with the flag.
    shutil.rmtree(workspace / ".foldline")
    with serve(workspace, env, args=["--new-log"]) as server:
        status, headers, _ = server.request("POST", "/invocations", {"prompt": "one more"})
        assert status == 200
        shutil.rmtree(workspace / ".foldline")
        os.kill(int(headers["x-foldline-worker"]), signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until a new worker answers (bounded)
            with contextlib.suppress(OSError):
                answered = server.request("GET", "/ping", timeout=2)[1]["x-foldline-worker"]
                if answered != headers["x-foldline-worker"]:
                    break
            time.sleep(0.05)
        status, body = server.invoke({"prompt": "and again"})
        assert (status, body["code"]) == (503, "log_missing"), body
        assert "refusing to start a new log" in body["error"]
    assert not (workspace / ".foldline" / "foldline.db").exists()
