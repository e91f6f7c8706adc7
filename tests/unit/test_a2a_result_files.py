"""The result's file parts: inline up to the limits, URLs beyond them; the recorded file opened
only as recorded, inside the workspace."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from adapters.http.a2a_result_files import INLINE_MAX, INLINE_TOTAL, Parts, open_recorded
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
    each = INLINE_MAX
    count = INLINE_TOTAL // each
    entries = [_write(tmp_path, f"f{n}.txt", each) for n in range(count + 1)]
    entries.append(_write(tmp_path, "big.bin", INLINE_MAX + 1))
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
