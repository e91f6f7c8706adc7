"""A promptFile is read the careful way a root server must: a run may swap it for a link, a
FIFO or a device between the check and the read, or point through a linked directory."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from adapters.system.prompts import PROMPT_LIMIT, read_prompt


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".foldline").mkdir(parents=True)
    (root / ".foldline" / "foldline.db.token").write_text("operator secret")
    (root / "prompt.txt").write_text("do the thing")
    return root


def _refused(workspace: Path, name: str) -> int:
    with pytest.raises(OSError) as refused:
        read_prompt(workspace, "", name, workspace / ".foldline")
    return refused.value.errno or 0


def test_a_plain_prompt_and_a_regular_file_are_read(workspace: Path) -> None:
    private = workspace / ".foldline"
    assert read_prompt(workspace, "inline", "", private) == b"inline"
    assert read_prompt(workspace, "", "prompt.txt", private) == b"do the thing"


def test_a_link_in_place_of_the_file_is_never_followed(workspace: Path) -> None:
    (workspace / "p").symlink_to(workspace / ".foldline" / "foldline.db.token")
    assert _refused(workspace, "p") == errno.ELOOP


def test_a_linked_directory_into_the_log_directory_is_refused(workspace: Path) -> None:
    (workspace / "d").symlink_to(workspace / ".foldline")
    assert _refused(workspace, "d/foldline.db.token") == errno.EACCES


def test_a_file_outside_the_workspace_through_a_linked_directory_is_refused(
    workspace: Path, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret").write_text("not the workspace's")
    (workspace / "out").symlink_to(tmp_path / "elsewhere")
    assert _refused(workspace, "out/secret") == errno.EACCES


def test_a_fifo_or_a_device_never_blocks_or_streams(workspace: Path) -> None:
    os.mkfifo(workspace / "fifo")
    assert _refused(workspace, "fifo") == errno.EINVAL  # opened without blocking, refused
    (workspace / "zero").symlink_to("/dev/zero")
    assert _refused(workspace, "zero") == errno.ELOOP


def test_a_file_grown_past_the_limit_is_refused(workspace: Path) -> None:
    (workspace / "big").write_bytes(b"x" * (PROMPT_LIMIT + 1))
    assert _refused(workspace, "big") == errno.EFBIG
