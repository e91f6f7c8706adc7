"""A writer's change as one binary patch, and which of its paths fall outside a job's scopes.

The patch is the unit that is reviewed, recorded and integrated: it carries everything the
writer did against its base (commits, uncommitted edits, new, deleted and binary files, mode
changes) with full blob ids, so that integrating it later can fall back to a 3-way merge with
the base blobs the worktree shares with the workspace.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from adapters.system.gitwork.runner import Git

# foldline's own log lives in the workspace's `.foldline/`: no change ever carries it.
LOG_DIR = ".foldline"
EXCLUDE_LOG = f":(exclude,top){LOG_DIR}"
# Plumbing, not `git diff`: porcelain reads diff.noprefix, color.diff, diff.external and
# textconv settings from the (agent-written) repository config, any of which would yield a
# patch `git apply` misreads or run a command. The staged index against the base commit.
DIFF = ("diff-index", "--cached", "-r", "--no-renames", "--no-ext-diff", "--no-textconv")


@dataclass(frozen=True)
class Patch:
    """A captured change: ``data`` (``git apply`` input, ``b""`` for no change), its
    ``sha256`` (hex) and ``size``, the changed ``paths`` (repository-relative, sorted) and
    the ``base`` commit it was taken against."""

    data: bytes
    sha256: str
    size: int
    paths: tuple[str, ...]
    base: str


def capture(git: Git, worktree: Path, base: str) -> Patch:
    """Everything the writer changed in ``worktree`` against ``base``, committed or not.

    All is staged first (``add -A``) because a writer may commit some of its work and leave the
    rest as edits or untracked files; the staged tree against ``base`` covers both, and
    deletions, binary files and mode changes come with it. The worktree's own index is the
    job's, so staging there changes nothing anyone else sees.

    Raises:
        GitFailed: ``worktree`` is not a work tree, ``base`` is not a commit.
    """
    stage_all(functools.partial(git.run, cwd=worktree))
    # One read of the index for both the patch and its paths (the worktree's index can change
    # under a run of the same user between two reads, and the paths judged against the write
    # scope must be the patch's own): the raw records (``-z``: NUL-terminated, so any path
    # reads back as written) and then, after an empty record, the patch, byte for byte what
    # ``-p`` alone prints.
    out = git.run([*DIFF, "-z", "--raw", "-p", "--binary", "--full-index", base, "--"], worktree)
    names, data = _split_raw(out)
    paths = tuple(sorted(n.decode("utf-8", "surrogateescape") for n in names))
    return Patch(data, hashlib.sha256(data).hexdigest(), len(data), paths, base)


def _split_raw(out: bytes) -> tuple[list[bytes], bytes]:
    """The paths of ``diff-index -z --raw -p`` output's raw records, and the patch after them.

    A record is ``:<modes> <ids> <status>`` NUL ``<path>`` NUL (no renames: one path each)."""
    names: list[bytes] = []
    at = 0
    while out.startswith(b":", at):
        path_start = out.index(b"\0", at) + 1
        path_end = out.index(b"\0", path_start)
        names.append(out[path_start:path_end])
        at = path_end + 1
    if out.startswith(b"\0", at):  # the empty record between the two parts
        at += 1
    return names, out[at:]


def outside(paths: Iterable[str], scopes: Iterable[str]) -> tuple[str, ...]:
    """The ``paths`` that are not inside any of ``scopes``, in the order given.

    A job may only change what it was scoped to; this is the check before a patch is accepted.
    A scope is workspace-relative: ``"src"`` and ``"src/"`` cover ``src`` and everything
    below it (not ``src2``), ``"docs/a.md"`` that file; ``""``, ``"."`` and ``"/"`` cover all.
    """
    prefixes = [_normal(scope) for scope in scopes]
    if "" in prefixes:
        return ()
    return tuple(
        path
        for path in paths
        if not any(path == scope or path.startswith(scope + "/") for scope in prefixes)
    )


def _normal(scope: str) -> str:
    """``scope`` without leading ``./`` or slashes at either end: ``""`` means everything."""
    scope = scope.strip()
    while scope.startswith("./"):
        scope = scope[2:]
    scope = scope.strip("/")
    return "" if scope == "." else scope


def stage_all(run: Callable[..., bytes]) -> None:
    """``git add -A`` of the whole tree but foldline's log directory, through ``run`` (a git
    runner bound to its tree and index). The directory is never read: where it is ignored
    (as a ``.gitignore`` says it should be) git does not descend into it, and where it is not,
    an exclude pathspec keeps it out. The pathspec is given only then, since git refuses an
    exclude that names an ignored path ("paths are ignored", exit 1)."""
    ignored = run(["check-ignore", "--no-index", "--", LOG_DIR], check=False).strip()
    run(["add", "-A", "--", "."] if ignored else ["add", "-A", "--", ".", EXCLUDE_LOG])
