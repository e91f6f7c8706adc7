"""The files of an inbound A2A message (adapters.http.a2a.message_files, adapters.http.a2a.parts):
names, limits and saving."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from adapters.http.a2a import message_files
from adapters.http.a2a import parts as a2a_parts
from adapters.http.a2a.message_files import (
    FILE_LIMIT,
    MESSAGE_LIMIT,
    LoadedFile,
    safe_name,
    segment,
)
from adapters.http.errors import RpcError
from adapters.http.inbound import PartIn
from adapters.system.url_policy import UrlPolicy


@pytest.mark.parametrize(
    ("filename", "media_type", "expected"),
    [
        ("photo.png", "image/png", "photo.png"),
        ("../../etc/passwd", "text/plain", "passwd"),
        ("C:\\Users\\me\\report.pdf", "application/pdf", "report.pdf"),
        (".bashrc", "text/plain", "bashrc"),
        ("...", "image/png", "file-3.png"),
        ("", "image/jpeg", "file-3.jpg"),
        (None, "application/x-unknown-thing", "file-3"),
        ("naïve café.txt", "text/plain", "na_ve_caf_.txt"),
        ("a/", "text/plain", "file-3.txt"),
    ],
)
def test_a2a_files_safe_name_keeps_a_plain_last_segment(
    filename: str | None, media_type: str, expected: str
) -> None:
    assert safe_name(filename, media_type, 3) == expected


def test_a2a_files_safe_name_is_bounded_and_keeps_its_extension() -> None:
    name = safe_name("x" * 500 + ".tar", "application/x-tar", 0)
    assert len(name) == message_files.NAME_MAX and name.endswith(".tar")
    assert len(safe_name("y" * 500, "text/plain", 0)) == message_files.NAME_MAX


def test_a2a_files_segment_is_the_id_when_safe_else_a_hash() -> None:
    assert segment("task-123_ab.c") == "task-123_ab.c"
    hashed = {segment(v) for v in ("../x", ".hidden", "a b", "x" * 65, "m-0123456789abcdef")}
    assert len(hashed) == 5 and all(h.startswith("m-") and len(h) == 18 for h in hashed)
    assert segment("../x") == segment("../x")


def test_a2a_files_check_size_names_the_limit() -> None:
    message_files.check_size(0, FILE_LIMIT, MESSAGE_LIMIT)
    with pytest.raises(ValueError, match="5 MB limit per file"):
        message_files.check_size(2, FILE_LIMIT + 1, FILE_LIMIT + 1)
    with pytest.raises(ValueError, match="10 MB limit per message"):
        message_files.check_size(2, 1, MESSAGE_LIMIT + 1)


def _raw(content: bytes, **named: object) -> PartIn:
    return PartIn(raw=base64.b64encode(content).decode(), **named)


def test_a2a_parts_read_keeps_text_and_loads_files_in_order() -> None:
    parts = [
        PartIn(text="hello"),
        _raw(b"ok", filename="a.txt"),
        PartIn(data={"k": 1}),
        _raw(b"\xff", media_type="image/png"),
    ]
    text, files = a2a_parts.read(parts, UrlPolicy())
    assert text == 'hello\n{"k": 1}'
    assert [(f.index, f.filename, f.media_type, f.content) for f in files] == [
        (1, "a.txt", "text/plain", b"ok"),
        (3, None, "image/png", b"\xff"),
    ]
    assert [f.saved_name for f in files] == ["1-a.txt", "3-file-3.png"]


@pytest.mark.parametrize(
    ("parts", "code", "words"),
    [
        ([_raw(b"x" * (FILE_LIMIT + 1))], -32602, "5 MB limit per file"),
        ([_raw(b"x" * FILE_LIMIT)] * 2 + [_raw(b"x")], -32602, "10 MB limit per message"),
        ([PartIn(raw="not base64!")], -32602, "base64"),
        ([_raw(b"x", filename=7)], -32602, "filename must be a string"),
        ([PartIn(url="http://169.254.169.254/latest")], -32602, "metadata"),
        ([PartIn(url="file:///etc/passwd")], -32602, "only http and https"),
        ([PartIn(url=None)], -32005, "supported"),
    ],
)
def test_a2a_parts_read_refuses_before_anything_is_stored(
    parts: list[PartIn], code: int, words: str
) -> None:
    with pytest.raises(RpcError) as refused:
        a2a_parts.read(parts, UrlPolicy())
    assert refused.value.rpc_code == code and words in refused.value.message


def _files() -> list[LoadedFile]:
    return [
        LoadedFile(0, "../a.png", "image/png", b"png"),
        LoadedFile(2, None, "text/plain", b"text"),
    ]


def test_a2a_files_save_writes_files_and_manifest_readable_by_all(tmp_path: Path) -> None:
    saved = message_files.save(tmp_path, "task-1", "msg/1", _files())
    folder = f"a2a-files/task-1/{segment('msg/1')}"
    assert saved.lines == (  # absolute: a run may start in a worktree
        f"FILE: {tmp_path / folder}/0-a.png (image/png, 3 bytes)",
        f"FILE: {tmp_path / folder}/2-file-2.txt (text/plain, 4 bytes)",
    )
    assert saved.manifest == tmp_path / folder / "manifest.json"
    manifest = json.loads(saved.manifest.read_text())
    assert [(m["path"], m["name"], m["size"]) for m in manifest] == [
        (f"{tmp_path / folder}/0-a.png", "../a.png", 3),
        (f"{tmp_path / folder}/2-file-2.txt", None, 4),
    ]
    assert sorted(p.name for p in (tmp_path / folder).iterdir()) == [
        "0-a.png",
        "2-file-2.txt",
        "manifest.json",
    ]
    for path in (tmp_path / folder).iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    for path in (tmp_path / "a2a-files", tmp_path / "a2a-files/task-1", tmp_path / folder):
        assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert message_files.prompt("look", saved) == "look\n" + "\n".join(saved.lines)
    assert message_files.prompt("", saved) == "\n".join(saved.lines)


def test_a2a_files_save_again_rewrites_the_same_files(tmp_path: Path) -> None:
    first = message_files.save(tmp_path, "task-1", "m", _files())
    again = message_files.save(tmp_path, "task-1", "m", _files())
    assert first == again and len(list(first.manifest.parent.iterdir())) == 3


def test_a2a_files_save_never_follows_a_link_the_run_left(tmp_path: Path) -> None:
    workspace, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    workspace.mkdir()
    elsewhere.mkdir()
    (workspace / "a2a-files").symlink_to(elsewhere)
    with pytest.raises(OSError):
        message_files.save(workspace, "task-1", "m", _files())
    assert list(elsewhere.iterdir()) == []


def test_a2a_files_save_leaves_no_half_file_when_a_write_fails(tmp_path: Path) -> None:
    folder = tmp_path / "a2a-files/task-1/m"
    folder.mkdir(parents=True)
    (folder / "2-file-2.txt").mkdir()  # the final name is taken: the rename fails
    with pytest.raises(OSError):
        message_files.save(tmp_path, "task-1", "m", _files())
    assert sorted(p.name for p in folder.iterdir()) == ["0-a.png", "2-file-2.txt"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
def test_a2a_files_save_gives_the_files_to_the_run_user(tmp_path: Path) -> None:
    saved = message_files.save(tmp_path, "task-1", "m", _files(), owner=(1000, 1000))
    folder = saved.manifest.parent
    for path in (*folder.iterdir(), folder, folder.parent, folder.parent.parent):
        assert (path.stat().st_uid, path.stat().st_gid) == (1000, 1000)
