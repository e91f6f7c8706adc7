"""A2A file parts in, against a real gunicorn (docs/a2a.md "File parts"): ``raw`` and ``url``
parts are saved into the task's directory, the run gets their paths (a line each in its prompt,
``FOLDLINE_A2A_FILES`` naming the manifest); over a limit or a refused URL, nothing is stored
and no task is made."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import http.server
import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

from adapters.http.a2a import message_files
from adapters.http.a2a.message_files import FetchFailed
from adapters.system.url_policy import UrlPolicy, UrlRefused
from tests.http.conftest import MakeClient, sql
from tests.support.channel import CHANNEL_ENV, job_events, of_type, wait_for
from tests.support.server import Server, serve

pytestmark = pytest.mark.server

# The run echoes its prompt, its manifest and the sha256 of each file its prompt names.
RUNNER = (
    'prompt=$(cat); printf "%s\\n" "$prompt"; echo "--manifest--"; cat "$FOLDLINE_A2A_FILES"; '
    'echo "--files--"; printf "%s\\n" "$prompt" | sed -n "s/^FILE: \\([^ ]*\\) .*/\\1/p" | '
    'while read -r f; do sha256sum "$f"; done'
)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


class _Files(http.server.BaseHTTPRequestHandler):
    """A loopback file server: ``/<size>/<name>`` answers ``size`` bytes, ``/to/...``
    redirects; others are 404."""

    seen: list[str]

    def do_GET(self) -> None:
        self.seen.append(self.path)
        head, _, name = self.path.strip("/").partition("/")
        if head == "to":  # ``/to/<host:port>/<path>``: a redirect there
            self.send_response(302)
            self.send_header("Location", f"http://{name}")
            self.end_headers()
            return
        if not head.isdigit():
            self.send_error(404)
            return
        body = PNG[: int(head)] if int(head) <= len(PNG) else b"x" * int(head)
        self.send_response(200)
        self.send_header("Content-Type", "image/jpeg" if name.endswith(".jpg") else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _file_server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Files,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _send(
    server: Server, message: dict[str, Any], method: str = "SendMessage", **configuration: Any
) -> Any:
    params = {"message": message, "configuration": configuration}
    body = {"jsonrpc": "2.0", "id": "r1", "method": method, "params": params}
    headers = {"a2a-version": "0.3" if "/" in method else "1.0"}
    status, _, raw = server.request("POST", "/", body, headers, timeout=60)
    assert status == 200, raw
    return json.loads(raw)


def _message(message_id: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"messageId": message_id, "role": "ROLE_USER", "parts": list(parts)}


def _raw(content: bytes, **named: str) -> dict[str, Any]:
    return {"raw": base64.b64encode(content).decode(), **named}


def _result(answer: dict[str, Any]) -> str:
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    return str(task["artifacts"][0]["parts"][0]["text"])


def _manifest(result: str) -> list[dict[str, Any]]:
    return list(json.loads(result.split("--manifest--\n")[1].split("--files--")[0]))


def _task_count(server: Server) -> int:
    answer = _send_list(server)
    return int(answer["result"]["totalSize"])


def _send_list(server: Server) -> Any:
    body = {"jsonrpc": "2.0", "id": "l", "method": "ListTasks", "params": {}}
    status, _, raw = server.request("POST", "/", body, {"a2a-version": "1.0"})
    assert status == 200, raw
    return json.loads(raw)


def test_a2a_raw_file_part_reaches_the_run_with_its_manifest(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as server:
        answer = _send(
            server,
            _message(
                "m-raw",
                {"text": "look at this"},
                _raw(PNG, filename="../../.evil/photo.png", mediaType="image/png"),
            ),
        )
    task = answer["result"]["task"]
    result = _result(answer)
    path = f"{workspace}/a2a-files/{task['id']}/m-raw/1-photo.png"
    line = f"FILE: {path} (image/png, {len(PNG)} bytes)"
    assert result.startswith(f"look at this\n{line}\n--manifest--\n")
    digest = hashlib.sha256(PNG).hexdigest()
    assert _manifest(result) == [
        {
            "path": path,
            "name": "../../.evil/photo.png",
            "mediaType": "image/png",
            "size": len(PNG),
            "sha256": digest,
        }
    ]
    assert f"{digest}  {path}" in result  # the run read the file at the path it was told
    saved = workspace / path
    assert saved.read_bytes() == PNG and saved.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in saved.parent.iterdir()) == ["1-photo.png", "manifest.json"]
    # The log records the prompt with its file lines, never the bytes.
    assert task["history"][0]["parts"][0]["text"] == f"look at this\n{line}"


# As RUNNER, but a last line starting with "hold" waits (bounded at 20 s) for a file the test
# never creates: only a supersede ends that run early.
HOLDING = (
    'prompt=$(cat); last=$(printf "%s\\n" "$prompt" | tail -n 1); '
    'case "$last" in hold*) i=0; '
    'while [ ! -e never ] && [ "$i" -lt 400 ]; do sleep 0.05; i=$((i+1)); done;; esac; '
    'printf "%s\\n" "$prompt"; echo "--manifest--"; cat "$FOLDLINE_A2A_FILES"; echo "--files--"'
)


def test_a2a_follow_up_with_a_file_starts_a_run_told_of_it(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_RUNNER": HOLDING}) as server:
        first = _send(server, _message("m-1", {"text": "hold on"}), returnImmediately=True)
        task_id = first["result"]["task"]["id"]
        follow_up = {
            **_message("m-2", {"text": "and this"}, _raw(b"a,b\n", filename="t.csv")),
            "taskId": task_id,
        }
        answer = _send(server, follow_up)
    assert answer["result"]["task"]["id"] == task_id
    path = f"{workspace}/a2a-files/{task_id}/m-2/1-t.csv"
    result = _result(answer)
    assert result.startswith(f"hold on\nand this\nFILE: {path} (text/csv, 4 bytes)\n")
    assert [entry["path"] for entry in _manifest(result)] == [path]


def test_a2a_file_delivered_into_a_live_run_is_named_in_its_text(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, CHANNEL_ENV) as server:
        first = _send(server, _message("m-1", {"text": "wait for more"}), returnImmediately=True)
        task = first["result"]["task"]
        jobs_path = f"/v1/jobs?session={task['contextId']}"
        (job,) = json.loads(server.request("GET", jobs_path)[2])["jobs"]
        wait_for(server, job["job_id"], "job.turn_started")
        follow_up = {**_message("m-2", _raw(b"notes", filename="n.txt")), "taskId": task["id"]}
        delivered = _send(server, follow_up, returnImmediately=True)
        wait_for(server, job["job_id"], "job.control_delivered")
        events = job_events(server, job["job_id"])
        jobs = json.loads(server.request("GET", jobs_path)[2])["jobs"]
    line = f"FILE: {workspace}/a2a-files/{task['id']}/m-2/0-n.txt (text/plain, 5 bytes)"
    assert delivered["result"]["task"]["id"] == task["id"] and len(jobs) == 1
    (control,) = of_type(events, "job.control")
    assert line in json.dumps(control["event"])  # what the run was sent names the file
    assert (workspace / f"a2a-files/{task['id']}/m-2/0-n.txt").read_bytes() == b"notes"
    assert not of_type(events, "job.superseded")


def test_a2a_url_file_part_is_fetched_under_the_url_policy(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"FOLDLINE_RUNNER": RUNNER, "FOLDLINE_PUSH_ALLOW": "127.0.0.1"}
    with _file_server() as (base, seen), serve(workspace, env) as server:
        fetched = _send(server, _message("m-url", {"url": f"{base}/300/cat.jpg"}))
        missing = _send(server, _message("m-404", {"url": f"{base}/nothing/here.png"}))
        tasks = _task_count(server)
    task_id = fetched["result"]["task"]["id"]
    path = f"{workspace}/a2a-files/{task_id}/m-url/0-cat.jpg"
    assert f"FILE: {path} (image/jpeg, 300 bytes)" in _result(fetched)
    assert (workspace / path).read_bytes() == PNG[:300]
    error = missing["error"]
    assert error["code"] == -32602 and "HTTP 404" in error["message"]
    assert f"{base}/nothing/here.png" in error["message"]
    assert seen == ["/300/cat.jpg", "/nothing/here.png"] and tasks == 1


def test_a2a_url_file_part_on_loopback_is_refused_without_the_allow(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with _file_server() as (base, seen), serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as server:
        answer = _send(server, _message("m-refused", {"text": "hi"}, {"url": f"{base}/3/a.png"}))
        tasks = _task_count(server)
    assert answer["error"]["code"] == -32602 and "loopback" in answer["error"]["message"]
    assert seen == [] and tasks == 0 and not (workspace / "a2a-files").exists()


def test_a2a_file_over_the_limit_per_file_stores_nothing(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"FOLDLINE_RUNNER": RUNNER, "FOLDLINE_PUSH_ALLOW": "127.0.0.1"}
    with _file_server() as (base, _), serve(workspace, env) as server:
        raw = _send(server, _message("m-big", _raw(b"x" * 5_000_001, filename="big.bin")))
        url = _send(server, _message("m-big-url", {"url": f"{base}/5000001/big.bin"}))
        tasks = _task_count(server)
    assert raw["error"]["code"] == -32602
    assert "exceeds the 5 MB limit per file" in raw["error"]["message"]
    assert url["error"]["code"] == -32602
    assert "exceeds the 5 MB limit per file" in url["error"]["message"]
    assert tasks == 0 and not (workspace / "a2a-files").exists()


def test_a2a_files_over_the_limit_per_message_store_nothing(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"FOLDLINE_RUNNER": RUNNER, "FOLDLINE_PUSH_ALLOW": "127.0.0.1"}
    parts = [
        _raw(b"a" * 4_000_000, filename="a.bin"),
        {"url": "URL/4000000/b.bin"},
        {"url": "URL/3000000/c.bin"},
    ]
    with _file_server() as (base, _), serve(workspace, env) as server:
        for part in parts:
            if "url" in part:
                part["url"] = part["url"].replace("URL", base)
        answer = _send(server, _message("m-many", *parts))
        tasks = _task_count(server)
    assert answer["error"]["code"] == -32602
    assert "exceed the 10 MB limit per message" in answer["error"]["message"]
    assert tasks == 0 and not (workspace / "a2a-files").exists()


def test_a2a_v03_file_part_with_bytes_name_and_mime_type(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    file = {
        "bytes": base64.b64encode(b"a,b\n1,2\n").decode(),
        "name": "t.csv",
        "mimeType": "text/csv",
    }
    message = {
        "kind": "message",
        "messageId": "m-03",
        "role": "user",
        "parts": [{"kind": "text", "text": "sum it"}, {"kind": "file", "file": file}],
    }
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as server:
        answer = _send(server, message, "message/send")
    task = answer["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    text = task["artifacts"][0]["parts"][0]["text"]
    path = f"{workspace}/a2a-files/{task['id']}/m-03/1-t.csv"
    assert f"sum it\nFILE: {path} (text/csv, 8 bytes)\n" in text
    assert (workspace / path).read_bytes() == b"a,b\n1,2\n"


async def _sdk_send(url: str) -> Any:
    client = await create_client(url, client_config=ClientConfig(streaming=False))
    message = Message(
        message_id="m-sdk",
        role=Role.ROLE_USER,
        parts=[
            Part(text="describe"),
            Part(raw=PNG, filename="pic.png", media_type="image/png"),
        ],
    )
    task = None
    async for response in client.send_message(SendMessageRequest(message=message)):
        task = response.task
    await client.close()
    return task


def test_a2a_official_client_sends_a_file_part(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as server:
        task = asyncio.run(_sdk_send(f"http://127.0.0.1:{server.port}"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    path = f"{workspace}/a2a-files/{task.id}/m-sdk/1-pic.png"
    result = task.artifacts[0].parts[0].text
    assert f"FILE: {path} (image/png, {len(PNG)} bytes)" in result
    assert f"{hashlib.sha256(PNG).hexdigest()}  {path}" in result
    assert (workspace / path).read_bytes() == PNG


def test_a2a_repeated_message_id_does_not_save_its_files_again(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    message = _message("m-once", _raw(b"hello", filename="h.txt"))
    with serve(workspace, {"FOLDLINE_RUNNER": RUNNER}) as server:
        first = _send(server, message)
        task_id = first["result"]["task"]["id"]
        saved = workspace / f"a2a-files/{task_id}/m-once/0-h.txt"
        assert saved.read_bytes() == b"hello"
        saved.unlink()  # were the files saved again, it would be back
        again = _send(server, message)
        tasks = _task_count(server)
    assert again["result"]["task"]["id"] == task_id and tasks == 1
    assert not saved.exists()
    assert sorted(p.name for p in saved.parent.iterdir()) == ["manifest.json"]


def test_a2a_files_that_cannot_be_saved_are_an_internal_error_and_start_nothing(
    make_client: MakeClient, workspace: Path
) -> None:
    client, runtime = make_client(RUNNER)
    (workspace / "a2a-files").write_text("in the way")  # a file where the directory goes
    body = {
        "jsonrpc": "2.0",
        "id": "r1",
        "method": "SendMessage",
        "params": {"message": _message("m-stuck", _raw(b"data", filename="d.bin"))},
    }
    answer = client.simulate_post("/", body=json.dumps(body)).json
    assert answer["error"]["code"] == -32603
    assert "could not be saved" in answer["error"]["message"]
    assert sql(runtime, "SELECT count(*) FROM tasks")[0][0] == 0
    assert sql(runtime, "SELECT count(*) FROM jobs")[0][0] == 0


def test_a2a_files_fetch_judges_each_redirect_by_the_policy() -> None:
    policy = UrlPolicy(["127.0.0.1"])
    with _file_server() as (base, seen):
        port = base.rsplit(":", 1)[1]
        body, served = message_files.fetch(f"{base}/to/127.0.0.1:{port}/4/a.jpg", policy)
        with pytest.raises(UrlRefused, match="loopback"):
            message_files.fetch(f"{base}/to/localhost:{port}/4/a.jpg", policy)
    assert (body, served) == (PNG[:4], "image/jpeg")
    assert seen == [f"/to/127.0.0.1:{port}/4/a.jpg", "/4/a.jpg", f"/to/localhost:{port}/4/a.jpg"]


def test_a2a_files_fetch_gives_up_on_a_server_that_does_not_answer() -> None:
    with socket.socket() as silent:  # listens, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/a.png"
        with pytest.raises(FetchFailed, match=r"took over 0\.5 s"):
            message_files.fetch(url, UrlPolicy(["127.0.0.1"]), timeout_s=0.5)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs as another user only under a root server")
def test_a2a_files_are_the_run_users_under_a_root_server() -> None:
    base = Path(tempfile.mkdtemp(prefix="foldline-files-"))  # pytest's root is root's 0700
    try:
        os.chmod(base, 0o711)
        workspace = base / "ws"
        workspace.mkdir()
        runner = (
            'prompt=$(cat); f=$(printf "%s\\n" "$prompt" | sed -n "s/^FILE: \\([^ ]*\\) .*/\\1/p")'
            '; echo "uid=$(id -u)"; sha256sum "$f"; rm "$f" && echo removed'
        )
        env = {"FOLDLINE_RUN_USER": "1000:1000", "FOLDLINE_RUNNER": runner}
        with serve(workspace, env) as server:
            answer = _send(server, _message("m-user", _raw(PNG, filename="p.png")))
        result = _result(answer)
        folder = workspace / f"a2a-files/{answer['result']['task']['id']}/m-user"
        assert "uid=1000\n" in result and hashlib.sha256(PNG).hexdigest() in result
        assert result.endswith("removed\n") and not (folder / "0-p.png").exists()
        assert (folder / "manifest.json").stat().st_uid == 1000
    finally:
        shutil.rmtree(base, ignore_errors=True)
