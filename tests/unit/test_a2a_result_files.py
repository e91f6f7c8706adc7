"""The result's file parts: with a reachable file route, inline up to its limits and URLs beyond
them; without one, inline up to the larger limits and a description (never a URL) beyond them;
the recorded file opened only as recorded, inside the workspace."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from adapters.http.a2a.result_files import INLINE_ONLY, WITH_ROUTE, Parts, open_recorded
from adapters.http.errors import ApiError
from engine.domain.job import FileEntry
from engine.domain.rows import TaskRow

BASE = "http://agent.example/"


def _row(*files: FileEntry) -> TaskRow:
    return TaskRow(
        task_id="t/1",
        session_id="s",
        state="completed",
        version=3,
        message_id="m",
        text="hi",
        status_text=None,
        result="done",
        created_at="",
        updated_at="",
        followups=(),
        files=files,
    )


def _write(workspace: Path, name: str, size: int) -> FileEntry:
    (workspace / name).write_bytes(b"x" * size)
    return FileEntry(path=name, size=size, workspace_path=name)


def test_parts_inline_small_files_within_the_total_and_link_the_rest(tmp_path: Path) -> None:
    each = WITH_ROUTE.per_file
    count = WITH_ROUTE.per_answer // each
    entries = [_write(tmp_path, f"f{n}.txt", each) for n in range(count + 1)]
    entries.append(_write(tmp_path, "big.bin", WITH_ROUTE.per_file + 1))
    parts = Parts(BASE, tmp_path)(_row(*entries))
    inline = [p for p in parts if "raw" in p]
    assert len(inline) == count  # the total is spent: the next small file is a URL
    assert base64.b64decode(inline[0]["raw"]) == b"x" * each
    assert parts[count] == {
        "url": f"{BASE}a2a/tasks/t%2F1/files/{count}",
        "filename": f"f{count}.txt",
        "mediaType": "text/plain",
    }
    assert "url" in parts[-1] and parts[-1]["mediaType"] == "application/octet-stream"
    listed = Parts(BASE, tmp_path, inline=False)(_row(*entries))
    assert all("url" in p and "raw" not in p for p in listed)


def test_parts_link_a_file_that_changed_or_vanished(tmp_path: Path) -> None:
    changed = _write(tmp_path, "a.txt", 3)
    (tmp_path / "a.txt").write_bytes(b"four")
    gone = FileEntry(path="b.txt", size=1, workspace_path="b.txt")
    assert all("url" in p for p in Parts(BASE, tmp_path)(_row(changed, gone)))


def test_parts_without_a_route_inline_up_to_the_larger_limits_and_describe_the_rest(
    tmp_path: Path,
) -> None:
    large = _write(tmp_path, "large.bin", INLINE_ONLY.per_file)  # inline: exactly the limit
    too_large = _write(tmp_path, "huge.png", INLINE_ONLY.per_file + 1)
    rest = INLINE_ONLY.per_answer - INLINE_ONLY.per_file
    fits = _write(tmp_path, "fits.txt", rest)  # spends the answer's budget to the byte
    over = _write(tmp_path, "over.txt", 1)
    changed = _write(tmp_path, "changed.txt", 3)
    (tmp_path / "changed.txt").write_bytes(b"four")
    row = _row(changed, large, too_large, fits, over)  # a file not read spends no budget
    parts = Parts(None, tmp_path)(row)
    assert [p.get("filename") for p in parts] == [None, "large.bin", None, "fits.txt", None]
    assert base64.b64decode(parts[1]["raw"]) == b"x" * INLINE_ONLY.per_file
    assert len(base64.b64decode(parts[3]["raw"])) == rest
    described = [parts[n] for n in (0, 2, 4)]
    assert all(set(p) == {"data"} for p in described)  # no url, no raw
    assert [
        (d["data"]["omitted"], d["data"]["filename"], d["data"]["size"]) for d in described
    ] == [
        ("unavailable", "changed.txt", 3),
        ("too_large", "huge.png", INLINE_ONLY.per_file + 1),
        ("over_budget", "over.txt", 1),
    ]
    assert "changed since the job recorded it" in described[0]["data"]["message"]
    assert described[1]["data"]["mediaType"] == "image/png"
    assert "FOLDLINE_PUBLIC_URL" in described[1]["data"]["message"]
    listed = Parts(None, tmp_path, inline=False)(row)
    assert [p["data"]["omitted"] for p in listed] == ["listing"] * 5


def test_open_recorded_refuses_what_is_not_the_recorded_workspace_file(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".foldline").mkdir(parents=True)
    (tmp_path / "secret").write_text("secret")
    (workspace / "link").symlink_to(tmp_path / "secret")
    (workspace / ".foldline" / "foldline.db").write_text("log")
    (workspace / "dir").mkdir()
    refused = {
        "outside": FileEntry(path="../secret", size=6, workspace_path="../secret"),
        "symlink": FileEntry(path="link", size=6, workspace_path="link"),
        "log": FileEntry(path=".foldline/foldline.db", size=3),
        "directory": FileEntry(path="dir", size=4096, workspace_path="dir"),
        "gone": FileEntry(path="none", size=1, workspace_path="none"),
    }
    for what, entry in refused.items():
        with pytest.raises(ApiError) as caught:
            open_recorded(workspace, entry)
        assert caught.value.status.startswith("404"), what
    ok = _write(workspace, "ok.txt", 5)
    fd, size = open_recorded(workspace, ok)
    os.close(fd)
    assert size == 5
    with pytest.raises(ApiError) as caught:
        open_recorded(workspace, FileEntry(path="ok.txt", size=4, workspace_path="ok.txt"))
    assert caught.value.status.startswith("410") and caught.value.code == "file_changed"
