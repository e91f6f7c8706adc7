"""Capturing a writer's change as one binary patch, and the scope check on its paths."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from adapters.system.gitwork.apply import matches, plan, write
from adapters.system.gitwork.patches import Patch, capture, outside
from adapters.system.gitwork.worktrees import add, head_commit
from tests.unit.test_gitwork_worktrees import GIT, git_cli, make_repo

BINARY = bytes(range(256)) * 4  # NULs and every other byte


def job_worktree(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, Path, str]:
    """A workspace with ``files`` committed, and a job's worktree on it: (workspace, wt, base)."""
    workspace = make_repo(tmp_path / "ws", files)
    base = head_commit(GIT, workspace)
    where = tmp_path / "wt"
    add(GIT, workspace, where, "j1", base)
    return workspace, where, base


def test_patches_capture_takes_commits_edits_new_deleted_binary_and_mode_changes(
    tmp_path: Path,
) -> None:
    files = {"a.txt": b"a\n", "b.txt": b"b\n", "gone.txt": b"bye\n", "run.sh": b"echo\n"}
    workspace, wt, base = job_worktree(tmp_path, files)
    (wt / "a.txt").write_text("committed by the writer\n")
    git_cli(wt, "commit", "-q", "-am", "writer's commit")
    (wt / "b.txt").write_text("edited, not committed\n")
    (wt / "new").mkdir()
    (wt / "new" / "untracked.txt").write_text("new\n")
    (wt / "gone.txt").unlink()
    (wt / "blob.bin").write_bytes(BINARY)
    (wt / "run.sh").chmod(0o755)

    patch = capture(GIT, wt, base)

    assert patch.paths == ("a.txt", "b.txt", "blob.bin", "gone.txt", "new/untracked.txt", "run.sh")
    assert patch.base == base
    assert patch.sha256 == hashlib.sha256(patch.data).hexdigest()
    assert patch.size == len(patch.data)
    assert b"GIT binary patch" in patch.data
    assert b"old mode 100644\nnew mode 100755" in patch.data
    assert b"deleted file mode" in patch.data
    # The patch rebuilds the writer's tree on the base, byte for byte.
    check = tmp_path / "check"
    git_cli(workspace, "worktree", "add", "-q", "--detach", str(check), base)
    git_cli(check, "apply", "--index", "-", input=patch.data)
    assert (check / "blob.bin").read_bytes() == BINARY
    assert (check / "run.sh").stat().st_mode & 0o111
    assert not (check / "gone.txt").exists()
    assert git_cli(check, "write-tree") == git_cli(wt, "write-tree")


def test_patches_capture_of_no_change_is_empty(tmp_path: Path) -> None:
    _, wt, base = job_worktree(tmp_path, {"a.txt": b"a\n"})
    assert capture(GIT, wt, base) == Patch(b"", hashlib.sha256(b"").hexdigest(), 0, (), base)
    # A change undone before the end is no change either.
    (wt / "a.txt").write_text("b\n")
    (wt / "a.txt").write_text("a\n")
    assert capture(GIT, wt, base).data == b""


def test_patches_capture_never_carries_foldline_s_own_directory(tmp_path: Path) -> None:
    _, wt, base = job_worktree(tmp_path, {"a.txt": b"a\n"})
    (wt / ".foldline").mkdir()
    (wt / ".foldline" / "foldline.db").write_bytes(b"forged log")
    (wt / "a.txt").write_text("b\n")
    patch = capture(GIT, wt, base)
    assert patch.paths == ("a.txt",)
    assert b".foldline" not in patch.data


def test_patches_capture_ignores_diff_settings_that_would_break_the_patch(
    tmp_path: Path,
) -> None:
    _, wt, base = job_worktree(tmp_path, {"a.txt": b"a\n"})
    for key, value in (("diff.noprefix", "true"), ("color.diff", "always")):
        git_cli(wt, "config", key, value)
    (wt / "a.txt").write_text("b\n")
    patch = capture(GIT, wt, base)
    assert patch.data.startswith(b"diff --git a/a.txt b/a.txt\n")
    assert b"\x1b[" not in patch.data


def test_patches_odd_file_names_are_listed_unquoted_and_integrate(tmp_path: Path) -> None:
    workspace, wt, base = job_worktree(tmp_path, {"a.txt": b"a\n"})
    latin1 = os.fsdecode("é-latin1.txt".encode("latin-1"))  # not UTF-8
    names = ("line\nbreak.txt", "tab\there.txt", "with space.txt", 'quo"te.txt', "ünï.txt", latin1)
    for name in names:
        (wt / name).write_bytes(os.fsencode(name))
    patch = capture(GIT, wt, base)
    assert patch.paths == tuple(sorted(names))
    scratch = workspace / ".git" / "scratch.index"
    planned = plan(GIT, workspace, patch.data, scratch)
    assert planned.paths == patch.paths
    write(GIT, workspace, planned.after_tree, planned.paths, scratch)
    assert all((workspace / name).read_bytes() == os.fsencode(name) for name in names)
    assert matches(GIT, workspace, planned.after_tree, planned.paths, scratch)
    write(GIT, workspace, planned.before_tree, planned.paths, scratch)
    assert not any((workspace / name).exists() for name in names)


@pytest.mark.parametrize(
    ("scopes", "expected"),
    [
        (["src"], ("docs/a.md", "src2/x.py", "README")),
        (["src/"], ("docs/a.md", "src2/x.py", "README")),
        (["./src"], ("docs/a.md", "src2/x.py", "README")),
        (["src", "docs/a.md"], ("src2/x.py", "README")),
        (["docs/a"], ("src/x.py", "src/deep/y.py", "docs/a.md", "src2/x.py", "README")),
        ([""], ()),
        (["."], ()),
        (["/"], ()),
        (["src", "."], ()),
        ([], ("src/x.py", "src/deep/y.py", "docs/a.md", "src2/x.py", "README")),
        (["README"], ("src/x.py", "src/deep/y.py", "docs/a.md", "src2/x.py")),
    ],
)
def test_patches_outside_names_the_paths_no_scope_covers(
    scopes: list[str], expected: tuple[str, ...]
) -> None:
    paths = ["src/x.py", "src/deep/y.py", "docs/a.md", "src2/x.py", "README"]
    assert outside(paths, scopes) == expected
