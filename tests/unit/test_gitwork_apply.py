"""Integrating patches: planned on a scratch index, written (and undone) through git only."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from adapters.system.gitwork.apply import Conflicts, Plan, matches, plan, write
from adapters.system.gitwork.patches import capture
from adapters.system.gitwork.runner import Git, GitFailed
from adapters.system.gitwork.worktrees import add, head_commit
from tests.unit.test_gitwork_worktrees import GIT, Snapshot, git_cli, make_repo, snapshot

FILES = {
    "a.txt": b"".join(b"line %d\n" % i for i in range(1, 21)),
    "b.txt": b"b\n",
    "gone.txt": b"bye\n",
    "run.sh": b"echo run\n",
    "lib/c.txt": b"c\n",
}
BINARY = bytes(range(256)) * 4
SETPRIV = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--"]


class Setup:
    """A workspace, its scratch index path, and a way to get patches from job worktrees."""

    def __init__(
        self, tmp_path: Path, files: dict[str, bytes] = FILES, git: Git = GIT, owner: int = 0
    ) -> None:
        self.tmp, self.git, self.jobs = tmp_path, git, 0
        self.workspace = make_repo(tmp_path / "ws", files)
        for path in [self.workspace, *self.workspace.rglob("*")] if owner else []:
            os.lchown(path, owner, owner)
        self.scratch = self.workspace / ".git" / "foldline-scratch.index"
        self.base = head_commit(git, self.workspace)

    def worktree(self) -> Path:
        self.jobs += 1
        add(self.git, self.workspace, self.tmp / f"wt{self.jobs}", f"j{self.jobs}", self.base)
        return self.tmp / f"wt{self.jobs}"

    def patch(self, where: Path) -> bytes:
        return capture(self.git, where, self.base).data

    def plan(self, patch: bytes) -> Plan:
        return plan(self.git, self.workspace, patch, self.scratch)

    def write(self, tree: str, paths: tuple[str, ...] | list[str]) -> None:
        write(self.git, self.workspace, tree, paths, self.scratch)

    def matches(self, tree: str, paths: tuple[str, ...] | list[str]) -> bool:
        return matches(self.git, self.workspace, tree, paths, self.scratch)

    def integrate(self, patch: bytes) -> Plan:
        planned = self.plan(patch)
        self.write(planned.after_tree, planned.paths)
        return planned

    def state(self) -> tuple[Snapshot, bytes]:
        return snapshot(self.workspace), (self.workspace / ".git" / "index").read_bytes()


def many_changes(setup: Setup) -> bytes:
    """A patch with an edit, a deletion, a new file in a new directory, a binary and a +x."""
    wt = setup.worktree()
    (wt / "b.txt").write_text("b edited\n")
    (wt / "gone.txt").unlink()
    (wt / "new" / "deep").mkdir(parents=True)
    (wt / "new" / "deep" / "n.txt").write_text("new\n")
    (wt / "blob.bin").write_bytes(BINARY)
    (wt / "run.sh").chmod(0o755)
    return setup.patch(wt)


def test_apply_two_disjoint_patches_both_land_in_the_working_tree_only(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    first, second = setup.worktree(), setup.worktree()
    (first / "b.txt").write_text("from the first job\n")
    (second / "lib" / "c.txt").write_text("from the second job\n")
    (_, index), head = setup.state(), head_commit(GIT, setup.workspace)
    for patch in [setup.patch(first), setup.patch(second)]:  # capture leaves the index alone
        setup.integrate(patch)
    assert (setup.workspace / "b.txt").read_text() == "from the first job\n"
    assert (setup.workspace / "lib" / "c.txt").read_text() == "from the second job\n"
    assert setup.state()[1] == index
    assert head_commit(GIT, setup.workspace) == head
    git_cli(setup.workspace, "diff", "--cached", "--quiet")  # nothing staged
    assert git_cli(setup.workspace, "diff", "--name-only").split() == ["b.txt", "lib/c.txt"]
    assert GIT.run(["ls-files"], setup.workspace, index=setup.scratch) == b""  # emptied


def test_apply_a_conflicting_patch_raises_and_changes_nothing(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    first, second = setup.worktree(), setup.worktree()
    (first / "a.txt").write_bytes(FILES["a.txt"].replace(b"line 10\n", b"first's 10\n"))
    (second / "a.txt").write_bytes(FILES["a.txt"].replace(b"line 10\n", b"second's 10\n"))
    (second / "b.txt").write_text("fine on its own\n")
    setup.integrate(setup.patch(first))
    before = setup.state()
    with pytest.raises(Conflicts, match=r"a\.txt") as raised:
        setup.plan(setup.patch(second))
    assert raised.value.paths == ("a.txt",)
    assert setup.state() == before


def test_apply_a_patch_whose_context_moved_still_applies(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    wt = setup.worktree()
    (wt / "a.txt").write_bytes(FILES["a.txt"].replace(b"line 2\n", b"job's 2\n"))
    # Lines inserted above the hunk in the workspace: a plain apply refuses the hunk, which
    # starts at line 1 and so must match there; the 3-way merge carries it.
    (setup.workspace / "a.txt").write_bytes(b"owner 1\nowner 2\n" + FILES["a.txt"])
    setup.integrate(setup.patch(wt))
    expected = b"owner 1\nowner 2\n" + FILES["a.txt"].replace(b"line 2\n", b"job's 2\n")
    assert (setup.workspace / "a.txt").read_bytes() == expected


def test_apply_writing_the_before_tree_undoes_everything(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    patch = many_changes(setup)
    (setup.workspace / "a.txt").write_text("owner's uncommitted edit\n")
    original = snapshot(setup.workspace)
    planned = setup.plan(patch)
    assert planned.paths == ("b.txt", "blob.bin", "gone.txt", "new/deep/n.txt", "run.sh")
    setup.write(planned.after_tree, planned.paths)
    after = snapshot(setup.workspace)
    assert after["a.txt"] == (b"owner's uncommitted edit\n", False)
    assert after["b.txt"] == (b"b edited\n", False)
    assert after["blob.bin"] == (BINARY, False)
    assert after["run.sh"] == (b"echo run\n", True)
    assert "gone.txt" not in after
    assert after["new/deep/n.txt"] == (b"new\n", False)
    setup.write(planned.before_tree, planned.paths)
    assert snapshot(setup.workspace) == original  # new/ and new/deep/ are gone too


def test_apply_a_half_written_or_garbled_state_is_repaired_by_writing_before(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path)
    original = snapshot(setup.workspace)
    planned = setup.plan(many_changes(setup))
    setup.write(planned.after_tree, planned.paths[:2])  # a crash part way
    (setup.workspace / "run.sh").write_bytes(b"\0garbage")
    (setup.workspace / "gone.txt").unlink()
    (setup.workspace / "gone.txt").mkdir()  # a directory where a file was
    (setup.workspace / "gone.txt" / "junk").write_text("junk\n")
    assert not setup.matches(planned.before_tree, planned.paths)
    assert not setup.matches(planned.after_tree, planned.paths)
    setup.write(planned.before_tree, planned.paths)
    assert snapshot(setup.workspace) == original
    assert setup.matches(planned.before_tree, planned.paths)
    setup.write(planned.after_tree, planned.paths)  # and forward again, twice: idempotent
    setup.write(planned.after_tree, planned.paths)
    assert setup.matches(planned.after_tree, planned.paths)


def test_apply_matches_compares_content_mode_and_absence(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    planned = setup.plan(many_changes(setup))
    before, after, paths = planned.before_tree, planned.after_tree, planned.paths
    assert setup.matches(before, paths)
    assert not setup.matches(after, paths)
    setup.write(after, paths)
    assert setup.matches(after, paths)
    assert setup.matches(after, ["gone.txt"])  # absent in both
    assert setup.matches(after, ["never/was.txt"])
    assert not setup.matches(before, ["gone.txt"])
    (setup.workspace / "run.sh").chmod(0o644)  # same content, lost +x
    assert not setup.matches(after, ["run.sh"])
    assert setup.matches(after, ["b.txt", "blob.bin"])
    (setup.workspace / "gone.txt").write_bytes(b"")  # an empty file is not an absent one
    assert not setup.matches(after, ["gone.txt"])


def test_apply_file_and_directory_swaps_are_written_and_undone(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    original = snapshot(setup.workspace)
    wt = setup.worktree()
    (wt / "b.txt").unlink()
    (wt / "b.txt").mkdir()
    (wt / "b.txt" / "inner.txt").write_text("inner\n")
    shutil.rmtree(wt / "lib")
    (wt / "lib").write_text("lib is a file now\n")
    planned = setup.integrate(setup.patch(wt))
    assert planned.paths == ("b.txt", "b.txt/inner.txt", "lib", "lib/c.txt")
    assert (setup.workspace / "b.txt" / "inner.txt").read_text() == "inner\n"
    assert (setup.workspace / "lib").read_text() == "lib is a file now\n"
    assert setup.matches(planned.after_tree, planned.paths)
    setup.write(planned.before_tree, planned.paths)
    assert snapshot(setup.workspace) == original


def test_apply_foldline_s_directory_is_never_planned_or_written(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    log = setup.workspace / ".foldline" / "foldline.db"
    log.parent.mkdir()
    log.write_bytes(b"the log")
    wt = setup.worktree()
    (wt / "b.txt").write_text("b edited\n")
    (wt / ".foldline").mkdir()
    (wt / ".foldline" / "foldline.db").write_bytes(b"forged")
    # A hand-made patch that does carry it (capture never makes one).
    git_cli(wt, "add", "-A", "-f")
    forged = git_cli(wt, "diff", "--cached", "--binary", "--full-index", setup.base).encode()
    assert b".foldline/foldline.db" in forged
    planned = setup.integrate(forged)
    assert planned.paths == ("b.txt",)
    for tree in (planned.before_tree, planned.after_tree):
        assert ".foldline" not in git_cli(setup.workspace, "ls-tree", "-r", "--name-only", tree)
    assert log.read_bytes() == b"the log"
    with pytest.raises(ValueError, match=r"\.foldline"):
        setup.write(planned.before_tree, [".foldline/foldline.db"])


def test_apply_an_ignored_foldline_directory_is_neither_read_nor_a_refusal(tmp_path: Path) -> None:
    # What a real workspace has: `.foldline/` in .gitignore (an exclude pathspec naming an
    # ignored path would make `git add` refuse), in the workspace and in a writer's worktree.
    setup = Setup(tmp_path, {**FILES, ".gitignore": b".foldline/\n"})
    (setup.workspace / ".foldline").mkdir()
    (setup.workspace / ".foldline" / "foldline.db").write_bytes(b"the log")
    wt = setup.worktree()
    (wt / ".foldline").mkdir()
    (wt / ".foldline" / "foldline.db").write_bytes(b"a log of its own")
    (wt / "b.txt").write_text("b edited\n")
    captured = capture(setup.git, wt, setup.base)
    assert captured.paths == ("b.txt",)
    planned = setup.integrate(captured.data)
    assert planned.paths == ("b.txt",)
    assert (setup.workspace / "b.txt").read_text() == "b edited\n"
    assert (setup.workspace / ".foldline" / "foldline.db").read_bytes() == b"the log"


def test_apply_an_empty_patch_changes_nothing_a_corrupt_one_is_no_conflict(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    with pytest.raises(GitFailed, match="corrupt patch") as raised:
        setup.plan(b"diff --git a/b.txt b/b.txt\n--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\nnonsense\n")
    assert not isinstance(raised.value, Conflicts)
    (setup.workspace / "b.txt").write_text("owner's edit\n")
    planned = setup.plan(b"")
    assert planned == Plan(planned.before_tree, planned.before_tree, ())


def test_apply_a_binary_patch_applies(tmp_path: Path) -> None:
    setup = Setup(tmp_path, {**FILES, "blob.bin": BINARY})
    wt = setup.worktree()
    (wt / "blob.bin").write_bytes(BINARY[::-1])
    setup.integrate(setup.patch(wt))
    assert (setup.workspace / "blob.bin").read_bytes() == BINARY[::-1]


def test_apply_a_patch_creating_an_ignored_file_that_exists_conflicts(tmp_path: Path) -> None:
    setup = Setup(tmp_path, {**FILES, ".gitignore": b"*.log\n"})
    wt = setup.worktree()
    (wt / "out.log").write_text("the job's\n")
    git_cli(wt, "add", "-f", "out.log")
    patch = setup.patch(wt)
    assert b"out.log" in patch
    (setup.workspace / "out.log").write_text("the owner's, ignored\n")
    with pytest.raises(Conflicts, match=r"out\.log"):
        setup.plan(patch)
    assert (setup.workspace / "out.log").read_text() == "the owner's, ignored\n"


def test_apply_a_created_path_an_ignored_directory_holds_conflicts_renames_included(
    tmp_path: Path,
) -> None:
    # The plan asks git where each created path lies only when something untracked is near
    # it: a file inside an ignored directory is, and a path a rename creates (a patch without
    # any "new file" header) counts as created too.
    setup = Setup(tmp_path, {**FILES, ".gitignore": b"build/\n"})
    wt = setup.worktree()
    (wt / "build").mkdir()
    (wt / "build" / "out.txt").write_text("the job's\n")
    git_cli(wt, "add", "-f", "build/out.txt")
    created = setup.patch(wt)
    wt = setup.worktree()
    (wt / "build").mkdir()
    git_cli(wt, "mv", "b.txt", "build/b.txt")
    renamed = git_cli(wt, "diff", "--cached", "-M", "--binary", "--full-index", setup.base)
    assert "rename to build/b.txt" in renamed and "new file mode" not in renamed
    (setup.workspace / "build").mkdir()
    (setup.workspace / "build" / "out.txt").write_text("the owner's, ignored\n")
    (setup.workspace / "build" / "b.txt").write_text("the owner's too\n")
    before = setup.state()
    with pytest.raises(Conflicts, match=r"build/out\.txt"):
        setup.plan(created)
    with pytest.raises(Conflicts, match=r"build/b\.txt"):
        setup.plan(renamed.encode())
    assert setup.state() == before
    (setup.workspace / "build" / "b.txt").unlink()  # nothing hidden there now: it applies
    setup.integrate(renamed.encode())
    assert (setup.workspace / "build" / "b.txt").read_bytes() == FILES["b.txt"]
    assert not (setup.workspace / "b.txt").exists()


def test_apply_write_never_goes_through_a_planted_symlink(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    victim_dir = tmp_path / "outside"
    victim_dir.mkdir()
    (victim_dir / "c.txt").write_text("not the workspace's\n")
    planned = setup.plan(b"")
    shutil.rmtree(setup.workspace / "lib")
    (setup.workspace / "lib").symlink_to(victim_dir)
    assert not setup.matches(planned.before_tree, ["lib/c.txt"])
    setup.write(planned.before_tree, ["lib/c.txt"])  # rewrite through git
    assert (victim_dir / "c.txt").read_text() == "not the workspace's\n"
    assert (setup.workspace / "lib" / "c.txt").read_text() == "c\n"
    shutil.rmtree(setup.workspace / "lib")
    (setup.workspace / "lib").symlink_to(victim_dir)
    empty = git_cli(setup.workspace, "hash-object", "-t", "tree", "/dev/null").strip()
    setup.write(empty, ["lib/c.txt"])  # delete through git
    assert (victim_dir / "c.txt").read_text() == "not the workspace's\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="switches users only as root")
def test_apply_as_the_run_user_writes_files_it_owns() -> None:
    # pytest's base directory is root's alone (0700): uid 1000 could not reach tmp_path.
    top = Path(tempfile.mkdtemp(prefix="foldline-gitwork-"))
    try:
        top.chmod(0o755)
        os.chown(top, 1000, 1000)  # the run user's HOME, and where its worktrees go
        git = Git(wrap=lambda argv: [*SETPRIV, *argv], env={"HOME": str(top)}, timeout_s=30)
        setup = Setup(top, git=git, owner=1000)
        setup.integrate(many_changes(setup))
        for name in ("b.txt", "blob.bin", "new/deep/n.txt", "new", ".git/foldline-scratch.index"):
            assert (setup.workspace / name).stat().st_uid == 1000, name
        assert (setup.workspace / "blob.bin").read_bytes() == BINARY
    finally:
        shutil.rmtree(top)


def test_apply_conflicts_name_files_the_workspace_deleted_or_already_has(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    wt = setup.worktree()
    (wt / "b.txt").write_text("edited by the job\n")
    (wt / "fresh.txt").write_text("created by the job\n")
    patch = setup.patch(wt)
    (setup.workspace / "b.txt").unlink()
    (setup.workspace / "fresh.txt").write_text("created by the owner\n")
    before = setup.state()
    with pytest.raises(Conflicts) as raised:
        setup.plan(patch)
    assert raised.value.paths == ("b.txt", "fresh.txt")
    assert setup.state() == before
