"""``writer_cycle.*``: one writer's git life in foldline (worktree, patch, integrate, removal)
against the same steps as plain git commands, in a repository of n files.

The baseline is what a careful script would run: ``git worktree add``, ``git add -A`` and
``git diff --cached --binary`` in the worktree, ``git apply --3way`` in the workspace,
``git worktree remove`` and ``git branch -D``. foldline runs the same through its git runner
(hooks off, a fresh environment) and integrates by plan and write: the working tree hashed
into a scratch index, the patch applied there, the paths written (ADR 0037), so that the
intent can name both trees before a file changes. The ratio is that price.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from adapters.system.gitwork import apply, patches, worktrees
from adapters.system.gitwork.runner import Git

EDITED = 5  # files each writer changes, and one it adds


def _git(cwd: Path, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", "-c", "user.name=b", "-c", "user.email=b@example.org", *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        check=True,
    ).stdout


def _repository(where: Path, files: int) -> Path:
    workspace = where / "ws"
    (workspace / "src").mkdir(parents=True)
    for n in range(files):
        (workspace / "src" / f"f{n:05}.txt").write_text(f"line {n}\n" * 40)
    (workspace / ".gitignore").write_text(".foldline/\n")
    _git(workspace, "init", "-q", "-b", "main")
    _git(workspace, "add", "-A")
    _git(workspace, "commit", "-qm", "start")
    return workspace


def _edit(tree: Path, cycle: int) -> None:
    for n in range(EDITED):
        path = tree / "src" / f"f{(cycle * EDITED + n):05}.txt"
        path.write_text(path.read_text().replace("line", f"cycle {cycle}", 1))
    (tree / "src" / f"new{cycle}.txt").write_text("new\n")


def _plain(workspace: Path, where: Path, cycle: int) -> None:
    name, tree = f"plain{cycle}", where / f"plain{cycle}"
    _git(workspace, "worktree", "add", "-q", "-b", name, str(tree), "HEAD")
    _edit(tree, cycle)
    _git(tree, "add", "-A")
    patch = _git(tree, "diff", "--cached", "--binary", "--full-index", "HEAD")
    _git(workspace, "apply", "--3way", "-", input=patch)
    _git(workspace, "worktree", "remove", "--force", str(tree))
    _git(workspace, "branch", "-D", name)


def _foldline(git: Git, workspace: Path, where: Path, cycle: int) -> None:
    job, tree = f"job{cycle}", where / f"job{cycle}"
    base = worktrees.head_commit(git, workspace)
    worktrees.add(git, workspace, tree, job, base)
    _edit(tree, cycle)
    patch = patches.capture(git, tree, base)
    scratch = workspace / ".git" / "foldline-integrate.index"
    plan = apply.plan(git, workspace, patch.data, scratch)
    apply.write(git, workspace, plan.after_tree, plan.paths, scratch)
    worktrees.remove(git, workspace, tree, job)


def _files(workspace: Path) -> dict[str, bytes]:
    """The working tree's files (git's own staging differs: plain ``apply --3way`` stages)."""
    return {str(p.relative_to(workspace)): p.read_bytes() for p in (workspace / "src").iterdir()}


def bench_writers(files: int, cycles: int) -> dict[str, float]:
    """Each side gets its own repository of ``files`` files and ``cycles`` writers, alternating
    plain and foldline cycle by cycle so that both see the same machine state."""
    with tempfile.TemporaryDirectory(prefix="foldline-bench-writers-") as temporary:
        root = Path(temporary)
        plain_ws = _repository(root / "plain", files)
        ours_ws = _repository(root / "ours", files)
        git = Git(env={"HOME": str(root)})
        spent = {"plain": 0.0, "foldline": 0.0}
        for cycle in range(cycles):
            started = time.perf_counter()
            _plain(plain_ws, root / "plain", cycle)
            spent["plain"] += time.perf_counter() - started
            started = time.perf_counter()
            _foldline(git, ours_ws, root / "ours", cycle)
            spent["foldline"] += time.perf_counter() - started
        assert _files(plain_ws) == _files(ours_ws), "both sides must end with the same tree"
    return {
        f"writer_cycle_ms.plain.{files}": spent["plain"] / cycles * 1000,
        f"writer_cycle_ms.foldline.{files}": spent["foldline"] / cycles * 1000,
        f"ratio.writer_cycle.{files}": spent["foldline"] / spent["plain"],
    }


if __name__ == "__main__":
    for key, value in bench_writers(int(os.environ.get("FILES", "500")), 10).items():
        print(f"{key}: {value:.3f}")
