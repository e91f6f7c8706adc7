"""A full disk under a real server (issue 25, goal 3): writes answer 507 ``storage_full`` with
``Retry-After``, never a 4xx or a 500; nothing half-written lands; once space is freed the same
server takes writes again without a restart; every acknowledged job is in the log and the log
verifies.

The workspace (and so the log) sits on a 2 MiB tmpfs mounted in a mount namespace of its own,
held by a process that lives at most ``HOLD_S``: nothing is mounted on the machine, and the tmpfs
goes with the holder. The test reaches it through ``/proc/<holder>/root``; the server runs in it
through ``nsenter``. Root only (mount namespaces); CI runs as root."""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import foldline
from tests.support.server import Server, read_events, read_until, serve

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs in a mount namespace: root"),
]

HOLD_S = 300  # the holder's (and so the tmpfs's) longest life, should the test die
FILL_LIMIT = 200  # invocations sent at most while the disk is full
FULL_ANSWERS = 5  # 507s to see before freeing the disk
# "held <gate>" holds until the gate file exists (at most 30 s), so its run ends while the disk
# is full at a moment the test chooses; any other prompt is echoed at once.
RUNNER = (
    'read -r p; case "$p" in "held "*) g=${p#held }; i=0; '
    'while [ ! -e "$g" ] && [ "$i" -lt 600 ]; do sleep 0.05; i=$((i+1)); done;; esac; '
    'echo "echo: $p"'
)
ENV = {"FOLDLINE_RUNNER": RUNNER, "FOLDLINE_SYNC_WAIT_S": "2"}


@contextlib.contextmanager
def small_disk(mountpoint: Path, size: str) -> Iterator[int]:
    """A tmpfs of ``size`` on ``mountpoint`` in a new mount namespace; yields its holder's pid
    (``nsenter --target`` it; ``/proc/<pid>/root`` + a path reads and writes the tmpfs)."""
    holder = subprocess.Popen(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'mount -t tmpfs -o size={size} tmpfs "$0" && echo mounted && exec sleep {HOLD_S}',
            str(mountpoint),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stderr is not None
        # The holder prints once mounted, or exits (closing stdout) saying why on stderr.
        assert holder.stdout.readline() == "mounted\n", holder.stderr.read()
        yield holder.pid
    finally:
        holder.kill()
        holder.communicate(timeout=10)


def fill(path: Path) -> int:
    """Write zeros to ``path`` until the disk refuses (ENOSPC); returns the bytes written."""
    chunk, written = b"\0" * 4096, 0
    with path.open("wb", buffering=0) as filler:
        for _ in range(1 << 16):  # 256 MiB: far more than the tmpfs holds
            try:
                written += filler.write(chunk)
            except OSError as ex:
                assert ex.errno == errno.ENOSPC, ex
                return written
    raise AssertionError(f"{path}: no ENOSPC after {written} bytes")


def invoke(
    server: Server, prompt: str, key: str, **extra: Any
) -> tuple[int, dict[str, str], dict[str, Any]]:
    body = {"prompt": prompt, "id": key, **extra}
    status, headers, raw = server.request("POST", "/invocations", body, timeout=30)
    return status, {k.lower(): v for k, v in headers.items()}, json.loads(raw)


def outcome(status: int, body: dict[str, Any]) -> str:
    """What an answer says, for counting: ``200 ok``, ``507 storage_full``, ..."""
    return f"{status} {body.get('status') or body.get('code') or body.get('error')}"


def final_result(server: Server, key: str) -> dict[str, Any]:
    """The job's ``result`` event, from an SSE ``get``: it comes once the job's end is logged."""
    conn = server.connection()
    try:
        body = json.dumps({"get": key})
        conn.request("POST", "/invocations", body, {"Accept": "text/event-stream"})
        results = [e for e in read_events(conn.getresponse()) if e.get("event") == "result"]
    finally:
        conn.close()
    assert results, f"no result for {key}"
    answer: dict[str, Any] = json.loads(results[-1]["data"])
    return answer


def test_storage_full_answers_507_and_the_server_takes_writes_again_once_space_returns(
    tmp_path: Path,
) -> None:
    workspace, gate = tmp_path / "ws", tmp_path / "gate"  # the gate is off the tmpfs
    workspace.mkdir()
    answered: dict[str, tuple[int, dict[str, Any]]] = {}
    filling: collections.Counter[str] = collections.Counter()
    freed: collections.Counter[str] = collections.Counter()
    full = []
    with small_disk(workspace, "2m") as holder:
        seen = Path(f"/proc/{holder}/root{workspace}")  # the tmpfs, from outside its namespace
        nsenter = ["nsenter", f"--target={holder}", "--mount", "--"]
        with serve(workspace, ENV, prefix=nsenter) as server:
            status, _, body = invoke(server, f"held {gate}", "held", **{"async": True})
            assert (status, body["status"]) == (200, "accepted")  # the log is on the tmpfs
            answered["held"] = (status, body)
            filled = fill(seen / "filler")
            for i in range(FILL_LIMIT):
                status, headers, body = invoke(server, f"full {i}", f"full-{i}")
                answered[f"full-{i}"] = (status, body)
                filling[outcome(status, body)] += 1
                if status == 507:
                    full.append((headers, body))
                    if len(full) == FULL_ANSWERS:
                        break
            session = answered["held"][1]["session"]
            spawned = server.request(
                "POST",
                "/v1/jobs",
                {"session": session, "prompt": "v1"},
                {"Content-Type": "application/json"},
            )
            message = {"messageId": "a2a-full", "role": "ROLE_USER", "parts": [{"text": "a2a"}]}
            rpc = {
                "jsonrpc": "2.0",
                "id": "r",
                "method": "SendMessage",
                "params": {"message": message},
            }
            sent = server.request("POST", "/", rpc)
            gate.touch()  # the held run ends now, its end refused for the full disk
            held_job = answered["held"][1]["invocation"]
            waited = read_until(server, f"the end of {held_job} waits for room")
            (seen / "filler").unlink()
            held = final_result(server, "held")  # recorded by the same run, no restart
            for i in range(5):
                status, _, body = invoke(server, f"freed {i}", f"freed-{i}")
                answered[f"freed-{i}"] = (status, body)
                freed[outcome(status, body)] += 1
        print(f"filler {filled} bytes; while full {dict(filling)}; freed {dict(freed)}")
        db = str(workspace / ".foldline" / "foldline.db")
        verified = foldline("verify", db, prefix=nsenter)
        exported = foldline("export", db, prefix=nsenter)

    assert len(full) == FULL_ANSWERS, dict(filling)
    for headers, body in full:
        assert body["code"] == "storage_full" and "full" in body["error"], body
        assert headers["retry-after"] == "5"
    status, headers, raw = spawned  # /v1: the one status table, its error shape
    assert status == 507 and json.loads(raw)["error"]["code"] == "storage_full", raw
    assert {k.lower(): v for k, v in headers.items()}["retry-after"] == "5"
    status, _, raw = sent  # A2A: HTTP 200 and -32603 (the client keeps only those), code in data
    assert status == 200 and json.loads(raw)["error"]["code"] == -32603, raw
    (info,) = json.loads(raw)["error"]["data"]  # one ErrorInfo (A2A 1.0 §9.5), the code in it
    assert info["reason"] == "INTERNAL_ERROR" and info["metadata"] == {"code": "storage_full"}, raw
    refused = {k: v for k, v in answered.items() if 400 <= v[0] < 500 or v[0] == 500}
    assert not refused  # a full disk is never the caller's fault, nor an unexplained 500
    assert "disk is full" in waited  # the run held its end while the disk was full
    assert (held["status"], held["result"]) == ("ok", f"echo: held {gate}\n")
    assert freed == {"200 ok": 5}  # the same server, no restart
    assert verified.returncode == 0, verified.stderr
    events = [json.loads(line) for line in exported.stdout.splitlines()]
    acknowledged = [body["invocation"] for status, body in answered.values() if status == 200]
    logged = {e["stream_id"] for e in events}
    assert len(acknowledged) == 6 and all(f"job:{job}" in logged for job in acknowledged)
    prompts = {e["event"].get("prompt") for e in events if isinstance(e["event"], dict)}
    refused_prompts = {key.replace("-", " ") for key, (st, _) in answered.items() if st == 507}
    assert "freed 0" in prompts and not refused_prompts & prompts  # nothing of a 507 landed
