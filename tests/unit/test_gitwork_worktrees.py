"""Job worktrees: added on their own branch, removed idempotently, with hooks never run."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adapters.system.gitwork.runner import Git, GitFailed, NotARepository
from adapters.system.gitwork.worktrees import add, branch_of, head_commit, listed, remove

GIT = Git(timeout_s=30)


def git_cli(repo: Path, *args: str, input: bytes | None = None) -> str:
    """Plain git for setting up and inspecting test repositories (not the code under test)."""
    done = subprocess.run(
        ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args],
        cwd=repo,
        input=input,
        capture_output=True,
        check=True,
        timeout=30,
        env={"PATH": os.environ["PATH"], "HOME": str(repo), "LC_ALL": "C"},
    )
    return done.stdout.decode()


def make_repo(path: Path, files: dict[str, bytes] | None = None) -> Path:
    """A repository at ``path`` with one commit holding ``files`` (a README by default)."""
    path.mkdir(parents=True)
    git_cli(path, "init", "-q", "-b", "main")
    for name, data in (files or {"README": b"hello\n"}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    git_cli(path, "add", "-A")
    git_cli(path, "commit", "-q", "-m", "base")
    return path


Snapshot = dict[str, object]


def snapshot(root: Path) -> Snapshot:
    """Every entry under ``root`` but ``.git``: content and executable bit, links, dirs."""
    found: Snapshot = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == ".git" or rel.startswith(".git/"):
            continue
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = (path.read_bytes(), bool(path.stat().st_mode & 0o111))
    return found


def test_worktrees_add_checks_out_the_base_on_the_job_branch(tmp_path: Path) -> None:
    workspace = make_repo(tmp_path / "ws")
    base = head_commit(GIT, workspace)
    git_cli(workspace, "commit", "-q", "--allow-empty", "-m", "later")
    where = tmp_path / "jobs" / "deep" / "j1"  # missing parents are created
    add(GIT, workspace, where, "j1", base)
    assert branch_of("j1") == "foldline/j1"
    assert git_cli(where, "rev-parse", "HEAD").strip() == base
    assert git_cli(where, "symbolic-ref", "HEAD").strip() == "refs/heads/foldline/j1"
    assert (where / "README").read_bytes() == b"hello\n"
    assert listed(GIT, workspace) == [(where, "foldline/j1")]


def test_worktrees_add_refuses_an_existing_branch_or_a_used_directory(tmp_path: Path) -> None:
    workspace = make_repo(tmp_path / "ws")
    base = head_commit(GIT, workspace)
    add(GIT, workspace, tmp_path / "j1", "j1", base)
    with pytest.raises(GitFailed, match="worktree add"):
        add(GIT, workspace, tmp_path / "other", "j1", base)
    with pytest.raises(GitFailed):
        add(GIT, workspace, tmp_path / "j1", "j2", base)


def test_worktrees_remove_is_idempotent_even_when_dirty(tmp_path: Path) -> None:
    workspace = make_repo(tmp_path / "ws")
    where = tmp_path / "j1"
    add(GIT, workspace, where, "j1", head_commit(GIT, workspace))
    (where / "README").write_text("edited\n")
    (where / "new.txt").write_text("untracked\n")
    remove(GIT, workspace, where, "j1")
    assert not where.exists()
    assert listed(GIT, workspace) == []
    assert git_cli(workspace, "branch", "--list", "foldline/*") == ""
    remove(GIT, workspace, where, "j1")  # twice: nothing left, no error
    assert listed(GIT, workspace) == []


def test_worktrees_remove_prunes_a_worktree_whose_directory_was_deleted(tmp_path: Path) -> None:
    workspace = make_repo(tmp_path / "ws")
    where = tmp_path / "j1"
    add(GIT, workspace, where, "j1", head_commit(GIT, workspace))
    add(GIT, workspace, tmp_path / "j2", "j2", head_commit(GIT, workspace))
    shutil.rmtree(where)
    remove(GIT, workspace, where, "j1")
    assert listed(GIT, workspace) == [(tmp_path / "j2", "foldline/j2")]
    assert git_cli(workspace, "for-each-ref", "--format=%(refname:short)") == "foldline/j2\nmain\n"


def test_worktrees_listed_omits_the_main_worktree_and_shows_a_detached_one(
    tmp_path: Path,
) -> None:
    workspace = make_repo(tmp_path / "ws")
    assert listed(GIT, workspace) == []
    git_cli(workspace, "worktree", "add", "-q", "--detach", str(tmp_path / "loose"))
    assert listed(GIT, workspace) == [(tmp_path / "loose", None)]


def test_worktrees_head_commit_refuses_what_is_not_a_repository_top(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(NotARepository, match="not a git work tree"):
        head_commit(GIT, plain)
    with pytest.raises(NotARepository):
        head_commit(GIT, tmp_path / "missing")
    workspace = make_repo(tmp_path / "ws", {"sub/a.txt": b"a\n"})
    with pytest.raises(NotARepository, match="not the top"):
        head_commit(GIT, workspace / "sub")
    empty = tmp_path / "empty"
    empty.mkdir()
    git_cli(empty, "init", "-q")
    with pytest.raises(NotARepository, match="without any commit"):
        head_commit(GIT, empty)
    assert head_commit(GIT, workspace) == git_cli(workspace, "rev-parse", "HEAD").strip()


def test_worktrees_add_runs_no_hook_and_no_fsmonitor_the_repository_configures(
    tmp_path: Path,
) -> None:
    workspace = make_repo(tmp_path / "ws")
    hook_marker, monitor_marker = tmp_path / "hook-ran", tmp_path / "fsmonitor-ran"
    hook = workspace / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {hook_marker}\n")
    hook.chmod(0o755)
    monitor = tmp_path / "monitor.sh"
    monitor.write_text(f"#!/bin/sh\ntouch {monitor_marker}\n")
    monitor.chmod(0o755)
    git_cli(workspace, "config", "core.fsmonitor", str(monitor))
    # The check itself can fail: plain git in this repository does run both.
    git_cli(workspace, "checkout", "-q", "-b", "probe")
    git_cli(workspace, "status", "--porcelain")
    assert hook_marker.exists() and monitor_marker.exists()
    hook_marker.unlink()
    monitor_marker.unlink()

    where = tmp_path / "j1"
    add(GIT, workspace, where, "j1", head_commit(GIT, workspace))
    remove(GIT, workspace, where, "j1")
    assert not hook_marker.exists()
    assert not monitor_marker.exists()


def test_worktrees_git_ignores_the_callers_git_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = make_repo(tmp_path / "ws")
    other = make_repo(tmp_path / "other")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    assert head_commit(GIT, workspace) == git_cli(workspace, "rev-parse", "HEAD").strip()


def test_worktrees_a_git_that_outlives_its_timeout_fails(tmp_path: Path) -> None:
    slow = Git(wrap=lambda argv: ["sh", "-c", 'sleep 5; exec "$@"', "sh", *argv], timeout_s=0.2)
    with pytest.raises(GitFailed, match="timed out"):
        slow.run(["--version"], tmp_path)


def test_worktrees_a_timed_out_git_leaves_no_lock_behind(tmp_path: Path) -> None:
    workspace = make_repo(tmp_path / "ws")
    # An agent-written filter that hangs while `git add` holds the index lock.
    git_cli(workspace, "config", "filter.slow.clean", "sleep 30; cat")
    (workspace / ".gitattributes").write_text("* filter=slow\n")
    (workspace / "README").write_text("changed\n")
    with pytest.raises(GitFailed, match="timed out"):
        Git(timeout_s=0.5).run(["add", "-A"], workspace)
    assert not list((workspace / ".git").glob("*.lock"))
    git_cli(workspace, "config", "--unset", "filter.slow.clean")
    GIT.run(["add", "-A"], workspace)  # the repository is usable again


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "wrapped"])
def test_worktrees_a_git_dies_with_the_process_that_started_it(
    tmp_path: Path, wrapped: bool
) -> None:
    # A server killed mid-integrate must leave no git writing on: its recovery decides next.
    workspace = make_repo(tmp_path / "ws")
    # The filter records its pid (kept by ``exec``) before it says it started: the orphan it
    # leaves is killed by that pid, never by a name another test's process may share.
    git_cli(
        workspace,
        "config",
        "filter.slow.clean",
        "echo $$ >> ../filter.pids; echo started >> ../filter.log; exec sleep 30",
    )
    (workspace / ".gitattributes").write_text("* filter=slow\n")
    (workspace / "README").write_text("changed\n")
    wrap = "lambda argv: ['sh', '-c', 'exec \"$@\"', 'sh', *argv]" if wrapped else "None"
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from adapters.system.gitwork.runner import Git;"
            f" Git(wrap={wrap}, timeout_s=60).run(['add', '-A'], Path(sys.argv[1]))",
            str(workspace),
        ],
        cwd=Path(__file__).resolve().parents[2],
    )
    deadline = time.monotonic() + 30
    while not (tmp_path / "filter.log").exists():  # git is in its filter, holding its lock
        assert time.monotonic() < deadline and starter.poll() is None, "git never started"
        time.sleep(0.02)
    starter.kill()
    starter.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _gits_in(workspace):  # no git is left working in the repository (its filter, the
        assert time.monotonic() < deadline, _gits_in(workspace)  # agent's, may linger)
        time.sleep(0.02)
    for pid in (tmp_path / "filter.pids").read_text().split():  # the filters, orphaned
        _kill_if_in(int(pid), workspace)


def _kill_if_in(pid: int, workspace: Path) -> None:
    """SIGKILL ``pid`` if it still works in ``workspace`` (a pid reused since is left alone)."""
    with contextlib.suppress(OSError):
        if os.readlink(f"/proc/{pid}/cwd") == str(workspace):
            os.kill(pid, signal.SIGKILL)


def _gits_in(workspace: Path) -> list[str]:
    """The pids of the git processes whose working directory is ``workspace``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                here = os.readlink(proc / "cwd") == str(workspace)
                if here and (proc / "comm").read_text().strip() == "git":
                    found.append(proc.name)
            except OSError:
                continue
    return found
