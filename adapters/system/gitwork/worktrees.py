"""Job worktrees: one ``git worktree`` per writing job, on its own ``foldline/<job>`` branch.

A writer works in a checkout of its own so that two jobs never see each other's half-done
files and the workspace stays as its owner left it until a change is accepted. Adding and
removing go through ``git worktree`` (run as the run user), never through the server's own
file calls, because the workspace and everything under it is agent-controlled.
"""

from __future__ import annotations

import os
from pathlib import Path

from adapters.system.gitwork.runner import Git, GitFailed, NotARepository

BRANCH_PREFIX = "foldline/"


def branch_of(job_id: str) -> str:
    """The branch a job's worktree is on: named after the job so that a crash leaves a branch
    that says whose it is, and ``remove`` can find it again."""
    return BRANCH_PREFIX + job_id


def head_commit(git: Git, workspace: Path) -> str:
    """The full id of the workspace's HEAD commit, the base a new worktree starts from.

    Git happily runs in a subdirectory of a repository (or of the server's own checkout above
    the workspace), which would base jobs on the wrong repository: the workspace must be the
    top of its work tree itself.

    Raises:
        NotARepository: ``workspace`` is missing, not inside a work tree, not its top, or the
            repository has no commit yet.
        GitFailed: git could not be run.
    """
    # One command for both answers: the top, then the commit (missing when there is none).
    try:
        found = git.run(
            ["rev-parse", "--show-toplevel", "--verify", "--quiet", "HEAD^{commit}"],
            workspace,
            check=False,
        )
        lines = found.decode().splitlines()
        if not lines:  # not a work tree at all: ask again, checked, for git's reason
            git.run(["rev-parse", "--show-toplevel"], workspace)
    except GitFailed as ex:
        raise NotARepository(f"{workspace} is not a git work tree: {ex}") from ex
    if not lines:
        raise NotARepository(f"{workspace} is not a git work tree")
    top = lines[0].strip()
    if not top or Path(top).resolve() != workspace.resolve():
        raise NotARepository(f"{workspace} is not the top of its git work tree ({top})")
    head = lines[1].strip() if len(lines) > 1 else ""
    if not head:
        raise NotARepository(f"{workspace} is a git repository without any commit")
    return head


def add(git: Git, workspace: Path, where: Path, job_id: str, base: str) -> None:
    """Check out ``base`` at ``where`` on a new branch ``foldline/<job_id>``.

    ``where`` must not exist (git refuses a non-empty directory); git creates it and its
    missing parents, as the run user, so the job can write there. A branch left by a crashed
    job of the same id makes this fail: ``remove`` first.

    Raises:
        GitFailed: the branch exists, ``where`` is in use, ``base`` is not a commit.
    """
    git.run(
        ["worktree", "add", "--no-track", "-b", branch_of(job_id), "--", _absolute(where), base],
        workspace,
    )


def remove(git: Git, workspace: Path, where: Path, job_id: str) -> None:
    """Remove the job's worktree and delete its branch; nothing happens for what is gone.

    Idempotent so that cleanup can be retried after any crash: the worktree goes even if it
    holds uncommitted edits (its change was captured or abandoned by then), a worktree whose
    directory was deleted behind git's back is pruned, and a missing branch is no error.

    Raises:
        GitFailed: the worktree is still registered after removal and pruning.
    """
    command = ["worktree", "remove", "--force", "--force", "--", _absolute(where)]
    try:
        git.run(command, workspace)
    except GitFailed:  # gone already, or deleted behind git's back: prune, then make sure
        git.run(["worktree", "prune"], workspace)
        if _is_listed(git, workspace, where):
            # Ask again, so the error names git's reason.
            git.run(command, workspace)
    ref = "refs/heads/" + branch_of(job_id)
    try:
        git.run(["update-ref", "-d", ref], workspace)  # a missing ref is no error to git
    except GitFailed:
        exists = git.run(["rev-parse", "--verify", "--quiet", ref], workspace, check=False)
        if exists.strip():
            raise


def listed(git: Git, workspace: Path) -> list[tuple[Path, str | None]]:
    """``(path, branch)`` of every linked worktree, the main one left out.

    Used to find worktrees a crash left behind; ``branch`` is None for a detached HEAD. Paths
    are as git recorded them, symlinks resolved.
    """
    out = git.run(["worktree", "list", "--porcelain", "-z"], workspace)
    found: list[tuple[Path, str | None]] = []
    path: Path | None = None
    branch: str | None = None
    for line in out.decode("utf-8", "surrogateescape").split("\0"):
        if line.startswith("worktree "):
            path, branch = Path(line.removeprefix("worktree ")), None
        elif line.startswith("branch "):
            branch = line.removeprefix("branch ").removeprefix("refs/heads/")
        elif line == "" and path is not None:
            found.append((path, branch))
            path = None
    return found[1:]


def _is_listed(git: Git, workspace: Path, where: Path) -> bool:
    names = {_absolute(where), os.path.realpath(where)}
    return any(str(path) in names for path, _ in listed(git, workspace))


def _absolute(where: Path) -> str:
    """``where`` made absolute without touching the file system (it may not exist yet), so git
    never reads it as an option or relative to the workspace."""
    return os.path.abspath(where)
