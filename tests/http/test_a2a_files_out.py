"""A job's ``MEDIA:`` files as ``file`` parts of the A2A result artifact, on a real gunicorn:
small ones inline, the rest as URLs of the read-only file route, through the official a2a-sdk
client; the route's refusals; the 0.3 shapes; no bytes in a listing."""

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
from a2a.types import Part, TaskState

from adapters.http.a2a_result_files import INLINE_MAX
from tests.support.a2a import user_message
from tests.support.server import Server, serve

pytestmark = pytest.mark.server

SMALL = bytes(range(256)) * 4  # 1 KiB: inline
BIG = os.urandom(INLINE_MAX + 4096)  # over the inline limit: a URL part

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


def test_media_files_come_back_as_file_parts_of_the_result(tmp_path: Path) -> None:
    workspace, env = _setup(tmp_path)
    with serve(workspace, env) as server:
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
        listed = _rpc(server, "ListTasks", {"pageSize": 10})["result"]["tasks"]
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
    with serve(workspace, env) as server:
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
