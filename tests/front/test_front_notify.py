"""The notify hand-off: the worker posts a finished job to the front, which checks it and runs
``FOLDLINE_NOTIFY`` with its own environment; only safe ``MEDIA`` files are copied for it, and
the hook's start and end are recorded once in the session's log."""

from __future__ import annotations

import http.client
import json
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

import apsw
import pytest

from tests.support.front import SID_A, Front, front, place, wait_until, worker_of

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="the front needs root (mounts)"),
]
RUNNER = (
    "cat >/dev/null; echo made > out.txt; ln -s /etc/hostname link.txt; mkfifo pipe;"
    " printf 'done\\nMEDIA:out.txt\\nMEDIA:link.txt\\nMEDIA:/etc/passwd\\nMEDIA:pipe\\n'"
)
HOOK = (
    'cat > "$OUT/text"; echo "$FOLDLINE_RUN_STATUS $CHANNEL_SECRET $(pwd)" > "$OUT/env";'
    ' for f in $(sed -n "s/^MEDIA://p" "$OUT/text"); do cat "$f" > "$OUT/copy"; done'
)


def _count(session: Path, kind: str) -> int:
    db = apsw.Connection(str(session / ".foldline" / "foldline.db"))
    rows = db.execute("SELECT count(*) FROM events WHERE event_type = ?", (kind,)).fetchall()
    return int(rows[0][0])


def _internal(served: Front) -> tuple[int, str]:
    """The front's loopback port and token, as its worker was given them."""
    worker = worker_of(served)
    env = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{worker}/environ").read_text().split("\0")
        if "=" in item
    )
    port = urlsplit(env["FOLDLINE_FRONT_URL"]).port
    assert port is not None
    return port, env["FOLDLINE_FRONT_TOKEN"]


def _post(port: int, token: str, body: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/notify", body, {"Authorization": f"Bearer {token}"})
    status = conn.getresponse().status
    conn.close()
    return status


def _post_raw(port: int, head: bytes) -> int:
    """The status a bare request head gets (no body sent: the limit is judged on the head)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(head)
        answer = conn.makefile("rb").readline()
    return int(answer.split()[1])


def test_front_runs_the_hook_for_a_finished_job_with_safe_media_only() -> None:
    with place() as where:
        where.mount()
        out = where.root / "hook"
        out.mkdir()
        env = {
            "FOLDLINE_RUNNER": RUNNER,
            "FOLDLINE_NOTIFY": HOOK,
            "OUT": str(out),
            "CHANNEL_SECRET": "s3cret",
        }
        session = where.base / SID_A
        with front(where, env) as served:
            status, answer = served.invoke({"prompt": "go"})
            assert status == 200 and answer["status"] == "ok", answer
            wait_until(lambda: _count(session, "job.notify_finished") == 1, what="hook end")
            port, token = _internal(served)
            assert _post(port, "wrong", b"{}") == 403
            for bad in (b"[]", b"{}", b'{"id":"j","session":"s s","status":"ok","text":""}'):
                assert _post(port, token, bad) == 400, bad
            assert _post(port, token, b'{"id":"j","session":"s","status":"maybe","text":""}') == 400
            auth = f"Authorization: Bearer {token}\r\n".encode()
            too_big = b"Content-Length: %d\r\n" % (16 * 1024 * 1024 + 1)
            assert _post_raw(port, b"POST /notify HTTP/1.1\r\n" + auth + too_big + b"\r\n") == 400
            assert _post_raw(port, b"POST /notify HTTP/1.1\r\n" + auth + b"\r\n") == 400
            assert _count(session, "job.notify_started") == 1  # none of these ran the hook
        text = (out / "text").read_text().splitlines()
        assert text[0] == "done" and len(text) == 2, text  # three MEDIA lines dropped
        status_word, secret, cwd = (out / "env").read_text().split()
        assert (status_word, secret) == ("ok", "s3cret")
        assert text[1].startswith(f"MEDIA:{cwd}/") and not Path(cwd).exists()  # removed after
        assert (out / "copy").read_text() == "made\n"
        assert _count(session, "job.notify_started") == 1
        assert "MEDIA dropped (resolves outside the workspace)" in served.output()
        assert "MEDIA dropped (outside the workspace)" in served.output()
        assert "MEDIA dropped (not a regular file)" in served.output()


def test_front_gets_the_owed_invocation_reply_only_never_an_a2a_tasks_job() -> None:
    """The worker decides what is handed off as ``foldline serve`` decides what it runs
    (design.md §9): an ``/invocations`` reply is, the job of an A2A message (A2A has push) is
    not."""
    with place() as where:
        where.mount()
        out = where.root / "hook"
        out.mkdir()
        env = {
            "FOLDLINE_RUNNER": 'read -r p; echo "reply to $p"',
            "FOLDLINE_NOTIFY": 'printf "%s\\n" "$(cat)" >> "$OUT/lines"',
            "OUT": str(out),
        }
        session = where.base / SID_A
        with front(where, env) as served:
            status, answer = served.invoke({"prompt": "asked"})
            assert status == 200 and answer["status"] == "ok", answer
            message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "told"}]}
            rpc = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message},
            }
            status, _, raw = served.request("POST", "/", rpc)
            task = json.loads(raw)["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task

            def settled() -> bool:  # the worker holds /ping busy through a hand-off
                ping = json.loads(served.request("GET", "/ping")[2])["status"]
                return ping == "Healthy" and _count(session, "job.notify_finished") >= 1

            wait_until(settled, what="both jobs and the hand-off over")
            assert _count(session, "job.finished") == 2
            assert _count(session, "job.notify_started") == 1
        assert (out / "lines").read_text().splitlines() == ["reply to asked"]
