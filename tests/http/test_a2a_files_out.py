"""A job's ``MEDIA:`` files as parts of the A2A result artifact, on a real gunicorn, through the
official a2a-sdk client. Without ``FOLDLINE_PUBLIC_URL`` (AgentCore forwards no file route):
every file inline up to the larger limits, a 1 MB file among them, and a description past them,
never a URL. With one: small files inline, the rest as URLs of the read-only file route; the
route's refusals; the 0.3 shapes; no bytes in a listing."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.compat.v0_3 import types as v03
from a2a.types import GetTaskRequest, ListTasksRequest, Part, TaskState
from google.protobuf.json_format import MessageToDict

from adapters.http.a2a.result_files import INLINE_ONLY, WITH_ROUTE
from tests.support.a2a import user_message
from tests.support.receiver import receiver
from tests.support.server import Server, free_port, serve

pytestmark = pytest.mark.server

SMALL = bytes(range(256)) * 4  # 1 KiB: inline
BIG = os.urandom(WITH_ROUTE.per_file + 4096)  # over the inline limit: a URL part

# The run writes its files into the workspace (its working directory), then names them.
SCRIPT = """
import sys
from pathlib import Path
prompt = sys.stdin.readline().strip()
Path("out").mkdir(exist_ok=True)
Path("out.png").write_bytes(Path(sys.argv[1]).read_bytes())
Path("out/big.bin").write_bytes(Path(sys.argv[2]).read_bytes())
Path("swap.txt").write_text("0123456789")
print("made", prompt)
print("MEDIA:out.png")
print("MEDIA:out/big.bin")
print("MEDIA:swap.txt")
print("MEDIA:../outside.txt")
print("MEDIA:.foldline/foldline.db")
"""

REPORT = os.urandom(1 << 20)  # the 1 MB file: inline without a public URL
# With the report, exactly the answer's inline budget: the largest frame a stream sends.
FILLER = INLINE_ONLY.per_answer - len(REPORT)
assert INLINE_ONLY.per_file >= FILLER  # fill.bin itself goes inline
HUGE = INLINE_ONLY.per_file + 1  # past a file's inline limit
# report.bin and fill.bin spend the budget; huge.bin is too large; tail.txt finds none left.
LARGE_SCRIPT = """
import sys
from pathlib import Path
sys.stdin.readline()
Path("report.bin").write_bytes(Path(sys.argv[1]).read_bytes())
Path("fill.bin").write_bytes(b"f" * int(sys.argv[2]))
Path("huge.bin").write_bytes(b"h" * int(sys.argv[3]))
Path("tail.txt").write_text("the end")
print("report ready")
for name in ("report.bin", "fill.bin", "huge.bin", "tail.txt"):
    print("MEDIA:" + name)
"""
UNSET_WARNING = "FOLDLINE_PUBLIC_URL is unset"


def _setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "small").write_bytes(SMALL)
    (tmp_path / "big").write_bytes(BIG)
    (tmp_path / "outside.txt").write_text("not yours")
    script = tmp_path / "runner.py"
    script.write_text(SCRIPT)
    runner = f"{sys.executable} {script} {tmp_path / 'small'} {tmp_path / 'big'}"
    return workspace, {"FOLDLINE_RUNNER": runner}


async def _send(url: str) -> Any:
    client = await create_client(url, client_config=ClientConfig(streaming=False))
    task = None
    async for response in client.send_message(user_message("m-files", "files please")):
        task = response.task
    streaming = await create_client(url)
    stream = [r async for r in streaming.send_message(user_message("m-stream", "again"))]
    for each in (client, streaming):
        await each.close()
    return task, stream


def _rpc(server: Server, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    status, _, raw = server.request("POST", "/", body)
    assert status == 200
    answer: dict[str, Any] = json.loads(raw)
    return answer


def _get(server: Server, url: str) -> tuple[int, dict[str, str], bytes]:
    prefix = f"http://127.0.0.1:{server.port}"
    assert url.startswith(prefix + "/a2a/tasks/"), url
    status, headers, raw = server.request("GET", url[len(prefix) :])
    return status, {k.lower(): v for k, v in headers.items()}, raw


def _file_parts(parts: Any) -> list[Part]:
    return [p for p in parts if p.WhichOneof("content") in ("raw", "url")]


def _public(env: dict[str, str]) -> tuple[int, dict[str, str]]:
    """A port for the server and ``env`` with ``FOLDLINE_PUBLIC_URL`` its loopback origin."""
    port = free_port()
    return port, {**env, "FOLDLINE_PUBLIC_URL": f"http://127.0.0.1:{port}"}


def test_media_files_come_back_as_file_parts_of_the_result(tmp_path: Path) -> None:
    workspace, env = _setup(tmp_path)
    port, env = _public(env)
    with serve(workspace, env, port=port) as server:
        task, stream = asyncio.run(_send(f"http://127.0.0.1:{server.port}"))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        text, *files = task.artifacts[0].parts
        assert text.text.startswith("made files please")
        # Only the workspace's own files: not ../outside.txt, not the log under .foldline.
        assert [(p.filename, p.media_type) for p in files] == [
            ("out.png", "image/png"),
            ("big.bin", "application/octet-stream"),
            ("swap.txt", "text/plain"),
        ]
        small, big, swap = files
        assert small.raw == SMALL and not small.url
        assert swap.raw == b"0123456789"
        assert not big.raw and big.url.endswith(f"/a2a/tasks/{task.id}/files/1")
        status, headers, raw = _get(server, big.url)
        assert (status, raw) == (200, BIG)
        assert headers["content-type"] == "application/octet-stream"
        assert headers["content-length"] == str(len(BIG))

        # The stream's last artifact update carries the same file parts.
        last = [r.artifact_update for r in stream if r.HasField("artifact_update")][-1]
        assert last.last_chunk
        assert [p.filename for p in _file_parts(last.artifact.parts)] == [
            "out.png",
            "big.bin",
            "swap.txt",
        ]

        # A listing sends no bytes: every file is a URL part.
        listed = _rpc(server, "ListTasks", {"pageSize": 10, "includeArtifacts": True})["result"][
            "tasks"
        ]
        parts = [p for t in listed for p in t["artifacts"][0]["parts"][1:]]
        assert parts and all("url" in p and "raw" not in p for p in parts)

        # The 0.3 shapes: kind file, bytes or uri, name and mimeType.
        legacy = _rpc(server, "tasks/get", {"id": task.id})["result"]
        v03.Task.model_validate(legacy)  # what a 0.3 client accepts
        legacy_files = [p["file"] for p in legacy["artifacts"][0]["parts"] if p["kind"] == "file"]
        assert legacy_files[0] == {
            "bytes": base64.b64encode(SMALL).decode(),
            "name": "out.png",
            "mimeType": "image/png",
        }
        assert legacy_files[1] == {
            "uri": big.url,
            "name": "big.bin",
            "mimeType": "application/octet-stream",
        }


def test_the_file_route_serves_only_recorded_unchanged_workspace_files(tmp_path: Path) -> None:
    workspace, env = _setup(tmp_path)
    port, env = _public(env)
    with serve(workspace, env, port=port) as server:
        task, _ = asyncio.run(_send(f"http://127.0.0.1:{server.port}"))
        base = f"/a2a/tasks/{task.id}/files"

        def refusal(path: str) -> tuple[int, str]:
            status, headers, raw = server.request("GET", path)
            content_type = {k.lower(): v for k, v in headers.items()}["content-type"]
            assert content_type.startswith("application/json"), headers
            error = json.loads(raw)["error"]
            assert "Traceback" not in raw.decode()
            # A path no route matches answers falcon's plain {"error": "not found"}.
            return status, error if isinstance(error, str) else error["code"]

        assert refusal(f"{base}/3") == (404, "not_found")  # only three files were recorded
        assert refusal(f"{base}/x") == (404, "not_found")
        assert refusal(f"{base}/-1") == (404, "not_found")
        assert refusal(f"{base}/%C2%B2") == (404, "not_found")  # a digit, but not 0-9
        assert refusal("/a2a/tasks/no-such-task/files/0") == (404, "not_found")
        assert refusal(f"{base}/..%2F..%2Foutside.txt")[0] == 404
        assert refusal(f"/a2a/tasks/{task.id}/files/../../../outside.txt")[0] == 404

        # Rewritten since the job recorded it: another size is a 410, never other bytes.
        (workspace / "out" / "big.bin").write_bytes(b"short")
        assert refusal(f"{base}/1") == (410, "file_changed")
        # Gone: a 404.
        (workspace / "out.png").unlink()
        assert refusal(f"{base}/0") == (404, "not_found")
        # Swapped for a symlink out of the workspace, same size: refused all the same.
        (workspace / "swap.txt").unlink()
        (tmp_path / "ten.txt").write_text("abcdefghij")
        (workspace / "swap.txt").symlink_to(tmp_path / "ten.txt")
        assert refusal(f"{base}/2") == (404, "not_found")
        # GetTask then sends the files it cannot serve as recorded as URLs (which say why).
        parts = _rpc(server, "GetTask", {"id": task.id})["result"]["artifacts"][0]["parts"]
        assert all("url" in p for p in parts[1:])


def _large_setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "report").write_bytes(REPORT)
    script = tmp_path / "runner.py"
    script.write_text(LARGE_SCRIPT)
    runner = f"{sys.executable} {script} {tmp_path / 'report'} {FILLER} {HUGE}"
    return workspace, {"FOLDLINE_RUNNER": runner, "FOLDLINE_PUSH_ALLOW": "127.0.0.1"}


async def _through_the_client(url: str) -> dict[str, Any]:
    """A blocking send, a streaming send, GetTask and ListTasks, all by the official client."""
    seen: dict[str, Any] = {}
    blocking = await create_client(url, client_config=ClientConfig(streaming=False))
    async for response in blocking.send_message(user_message("m-report", "report please")):
        seen["task"] = response.task
    streaming = await create_client(url)
    seen["stream"] = [r async for r in streaming.send_message(user_message("m-again", "again"))]
    seen["get"] = await blocking.get_task(GetTaskRequest(id=seen["task"].id))
    seen["list"] = await blocking.list_tasks(ListTasksRequest(page_size=10, include_artifacts=True))
    for client in (blocking, streaming):
        await client.close()
    return seen


def _stderr_so_far(server: Server) -> str:
    """What the server wrote on stderr until now (its boot lines come before /ping answers)."""
    assert server.process.stderr is not None
    os.set_blocking(server.process.stderr.fileno(), False)
    return (server.process.stderr.read() or b"").decode(errors="replace")


def _described(part: Part) -> dict[str, Any]:
    """A part that stands for a file not sent: its ``data``, and nothing of a file's own."""
    assert not part.raw and not part.url and not part.filename, part
    data: dict[str, Any] = MessageToDict(part)["data"]
    return data


def _check_large_parts(parts: Any) -> None:
    """The result's four files as a caller without the file route gets them."""
    text, report, fill, huge, tail = parts
    assert text.text.startswith("report ready\nMEDIA:report.bin")
    assert (report.filename, report.media_type) == ("report.bin", "application/octet-stream")
    assert report.raw == REPORT and not report.url  # the 1 MB file, inline, bytes equal
    assert fill.raw == b"f" * FILLER
    too_large, over_budget = _described(huge), _described(tail)
    assert (too_large["omitted"], too_large["filename"], too_large["size"]) == (
        "too_large",
        "huge.bin",
        HUGE,
    )
    assert f"over the {INLINE_ONLY.per_file} bytes a file may send inline" in too_large["message"]
    assert (over_budget["omitted"], over_budget["filename"], over_budget["mediaType"]) == (
        "over_budget",
        "tail.txt",
        "text/plain",
    )


def test_without_a_public_url_a_1_mb_file_reaches_the_official_client_inline(
    tmp_path: Path,
) -> None:
    workspace, env = _large_setup(tmp_path)
    with receiver() as hook, serve(workspace, env) as server:
        assert UNSET_WARNING not in _stderr_so_far(server)  # a loopback server does not nag
        seen = asyncio.run(_through_the_client(f"http://127.0.0.1:{server.port}"))
        task = seen["task"]
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        _check_large_parts(task.artifacts[0].parts)
        _check_large_parts(seen["get"].artifacts[0].parts)
        # A stream's last artifact update: the whole budget in one SSE frame (7 MB of JSON).
        last = [r.artifact_update for r in seen["stream"] if r.HasField("artifact_update")][-1]
        assert last.last_chunk
        _check_large_parts(last.artifact.parts)

        # A listing sends no bytes and no URL: each file described instead.
        listed = next(t for t in seen["list"].tasks if t.id == task.id)
        descriptions = [_described(p) for p in listed.artifacts[0].parts[1:]]
        assert [(d["omitted"], d["filename"]) for d in descriptions] == [
            ("listing", "report.bin"),
            ("listing", "fill.bin"),
            ("listing", "huge.bin"),
            ("listing", "tail.txt"),
        ]
        assert descriptions[0]["size"] == len(REPORT)

        # 0.3: the file's bytes, and the description a data part.
        legacy = _rpc(server, "tasks/get", {"id": task.id})["result"]
        v03.Task.model_validate(legacy)  # what a 0.3 client accepts
        parts = legacy["artifacts"][0]["parts"]
        assert parts[1]["file"]["bytes"] == base64.b64encode(REPORT).decode()
        assert parts[3]["kind"] == "data" and parts[3]["data"]["omitted"] == "too_large"
        assert not any("uri" in p.get("file", {}) for p in parts)

        # A push delivery carries the same parts, never a URL of this server's bind address.
        message = {"messageId": "m-push", "role": "ROLE_USER", "parts": [{"text": "push"}]}
        config = {"taskPushNotificationConfig": {"url": hook.url}}
        _rpc(server, "SendMessage", {"message": message, "configuration": config})
        final = [r.body for r in hook.wait_for(2) if "task" in r.body]
        assert final, hook.log()
        pushed = final[-1]["task"]["artifacts"][0]["parts"]
        assert base64.b64decode(pushed[1]["raw"]) == REPORT
        assert pushed[3]["data"]["omitted"] == "too_large"
        assert not any("url" in p for p in pushed)


def test_with_a_public_url_the_1_mb_file_comes_as_a_url_part(tmp_path: Path) -> None:
    workspace, env = _large_setup(tmp_path)
    port, env = _public(env)
    with serve(workspace, env, port=port) as server:
        assert UNSET_WARNING not in _stderr_so_far(server)
        seen = asyncio.run(_through_the_client(f"http://127.0.0.1:{port}"))
        _, *files = seen["task"].artifacts[0].parts
        assert [(p.filename, "url" if p.url else "raw") for p in files] == [
            ("report.bin", "url"),
            ("fill.bin", "url"),
            ("huge.bin", "url"),
            ("tail.txt", "raw"),  # a small file still travels inline
        ]
        report = files[0]
        assert report.url == f"http://127.0.0.1:{port}/a2a/tasks/{seen['task'].id}/files/0"
        status, _, raw = _get(server, report.url)
        assert (status, raw) == (200, REPORT)
