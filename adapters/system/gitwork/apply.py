"""Integrating an accepted patch: plan it on a scratch index, then write its paths through git.

Planning never touches the working tree or the real index: the workspace as it is now (HEAD plus
every edit, ``.foldline/`` left out) is read into a scratch index, the patch is applied there
with a 3-way fallback, and the two trees are the plan. Writing then makes only the changed
paths of the working tree equal to a tree, and can make them equal to the *before* tree just as
well: that is how a half-written integration is undone after a crash. All file changes are made
by git's checkout code (``read-tree -u``), which refuses to write or delete through a symlink
the agent may have planted, and runs as the run user.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from adapters.system.gitwork.patches import LOG_DIR, stage_all
from adapters.system.gitwork.runner import Git, GitFailed
from adapters.system.gitwork.scratch import Scratch, entries, layers, parents
from adapters.system.gitwork.worktrees import head_commit

# `git apply` matches these with wildmatch without WM_PATHNAME: `*` crosses slashes.
APPLY = (
    "apply",
    "--cached",
    "--3way",
    "--whitespace=nowarn",
    "--exclude=" + LOG_DIR,
    "--exclude=" + LOG_DIR + "/*",
    "-",
)
_NAMED = (
    re.compile(r"^error: patch failed: (.+):\d+$"),
    re.compile(
        r"^error: (.+): (?:patch does not apply|does not exist in index|already exists in "
        r"(?:index|working directory)|does not match index|wrong type)$"
    ),
    re.compile(r"^Applied patch to '(.+)' with conflicts\.$"),
    re.compile(r"^U (.+)$"),
)


@dataclass(frozen=True)
class Plan:
    """What integrating a patch does: the working tree's content as ``before_tree``, the result
    as ``after_tree``, and the ``paths`` where they differ (sorted)."""

    before_tree: str
    after_tree: str
    paths: tuple[str, ...]


class Conflicts(GitFailed):
    """The patch does not apply to the working tree as it is; ``paths`` says where."""

    def __init__(self, message: str, paths: Sequence[str], stderr: str = "") -> None:
        self.paths = tuple(paths)
        super().__init__(f"{message}: {', '.join(self.paths) or '(no path named)'}", stderr)


def plan(git: Git, workspace: Path, patch: bytes, scratch: Path) -> Plan:
    """The trees before and after applying ``patch`` to the workspace's current working tree.

    Computed on the scratch index so that a patch that does not apply leaves nothing behind,
    and so that the plan can be recorded before a single file is written. The patch is applied
    to the working tree's content, not to HEAD, because that is what it will be written over.
    Since git 2.32, ``--3way`` merges first, with the preimage blobs the patch names (present,
    since the worktree shares the workspace's objects), and applies directly only where a blob
    is missing (a new file); the merge is what carries a hunk whose context moved, which a
    direct apply refuses when the hunk is anchored at the start or end of the file.
    A path the patch creates where the working tree has an ignored file is a conflict, since
    writing would silently replace that file.

    Raises:
        Conflicts: the patch does not apply at the paths named; nothing in the workspace
            changed (git only stored objects).
        NotARepository: the workspace is not the top of a repository with a commit.
        GitFailed: git failed otherwise, a corrupt patch included.
    """
    head = head_commit(git, workspace)
    with Scratch(git, workspace, scratch, start=head) as index:
        stage_all(index.run)
        before = index.write_tree()
        if not patch:
            return Plan(before, before, ())
        # What the working tree holds that the index now does not (ignored files): listed
        # only if the patch may create a path, before the apply adds its paths to the index.
        others = _untracked(index) if _may_create(patch) else None
        try:
            index.run(list(APPLY), input=patch)
        except GitFailed as ex:
            unmerged = index.run(["ls-files", "--unmerged", "-z"])
            conflicting = {
                r.partition(b"\t")[2].decode("utf-8", "surrogateescape")
                for r in unmerged.split(b"\0")
                if b"\t" in r
            }
            conflicting.update(_named_in(ex.stderr))
            if not conflicting:
                raise  # not a conflict: a corrupt patch, or git failing for its own reasons
            raise Conflicts("the patch does not apply", sorted(conflicting), ex.stderr) from ex
        after = index.write_tree()
        changed = index.run(
            ["diff-tree", "-r", "--no-renames", "--name-status", "-z", before, after]
        ).split(b"\0")
    status = {
        changed[i + 1].decode("utf-8", "surrogateescape"): changed[i]
        for i in range(0, len(changed) - 1, 2)
    }
    paths = tuple(sorted(status))
    created = [p for p in paths if status[p] == b"A"]  # absent from the working tree's tree
    # Only a created path near something untracked can be hidden there; the exact check
    # (``matches``, a command per layer of paths) is made for those alone.
    if (
        created
        and (others is None or _near(created, others))
        and not matches(git, workspace, before, created, scratch)
    ):
        hidden = [p for p in created if not matches(git, workspace, before, [p], scratch)]
        raise Conflicts("the patch creates files the working tree has (ignored)", hidden)
    return Plan(before, after, paths)


def write(git: Git, workspace: Path, tree: str, paths: Sequence[str], scratch: Path) -> None:
    """Make the working tree's ``paths`` hold what ``tree`` holds there, whatever they hold now.

    The same call applies a plan (``after_tree``) and undoes it (``before_tree``), and it is
    idempotent, so a crash in the middle is repaired by writing either tree again. Only
    ``paths`` are touched; a path absent from ``tree`` is deleted (with directories it leaves
    empty). The real index and HEAD stay as they are: the change shows as an edit.

    Raises:
        ValueError: a path is inside ``.foldline/``, which only foldline writes.
        GitFailed: git failed (an invalid path, an unreadable tree).
    """
    wanted = _checked(paths)
    present = entries(git, workspace, tree, wanted)
    with Scratch(git, workspace, scratch) as index:  # empty
        target = ""
        if present:
            index.put(present)
            target = index.write_tree()
        hole = index.placeholder()
        # An index cannot hold both `a` and `a/b`: deletions go layer by layer, and before
        # the writes, so a file that must become a directory (or back) is out of the way.
        empty = ""
        for layer in layers([p for p in wanted if p not in present]):
            index.run(["read-tree", "--empty"])
            empty = empty or index.write_tree()
            index.put({p: hole for p in layer})
            index.run(["read-tree", "--reset", "-u", "--no-sparse-checkout", empty])
        if present:
            # Old entries that differ from the target make git check every path out anew.
            # (They replace the target's own entries, or fill the index the deletions emptied.)
            index.put({p: hole for p in present})
            index.run(["read-tree", "--reset", "-u", "--no-sparse-checkout", target])


def matches(git: Git, workspace: Path, tree: str, paths: Sequence[str], scratch: Path) -> bool:
    """Whether the working tree's ``paths`` hold what ``tree`` holds there (absent == absent).

    Tells whether a recorded integration was fully written, or fully undone, after a crash.
    Content and executable bit are compared by git (after its clean filters), never read by
    the server; a path behind a symlinked directory counts as absent.

    Raises:
        ValueError: a path is inside ``.foldline/``.
        GitFailed: git failed.
    """
    wanted = _checked(paths)
    present = entries(git, workspace, tree, wanted)
    with Scratch(git, workspace, scratch) as index:
        hole = index.placeholder()
        for layer in layers(wanted):
            index.load({p: present.get(p, hole) for p in layer})
            # -q: a path that differs is an answer, not an error (the exit status stays 0).
            index.run(["update-index", "-q", "--refresh"])
            out = index.run(["diff-files", "--name-status", "-z"]).split(b"\0")
            status = {
                out[i + 1].decode("utf-8", "surrogateescape"): out[i]
                for i in range(0, len(out) - 1, 2)
            }
            for p in layer:
                if (p in present and p in status) or (p not in present and status.get(p) != b"D"):
                    return False
    return True


def _may_create(patch: bytes) -> bool:
    """Whether a patch has a header that makes a path (a new file, a rename's or a copy's
    target): only then can it create a path the working tree hides."""
    return any(
        marker in patch for marker in (b"\nnew file mode ", b"\nrename to ", b"\ncopy to ")
    ) or patch.startswith(b"new file mode ")


def _untracked(index: Scratch) -> set[str]:
    """Everything in the working tree the scratch index does not hold, ignore rules not
    applied, a directory holding nothing tracked named once (as ``dir``)."""
    out = index.run(["ls-files", "--others", "--directory", "-z"])
    return {
        name.decode("utf-8", "surrogateescape").rstrip("/") for name in out.split(b"\0") if name
    }


def _near(paths: Sequence[str], others: set[str]) -> bool:
    """Whether any of ``paths`` is one of ``others``, lies below one, or has one below it."""
    above = {parent for other in others for parent in parents(other)}
    return any(p in others or p in above or any(d in others for d in parents(p)) for p in paths)


def _checked(paths: Sequence[str]) -> list[str]:
    wanted = list(dict.fromkeys(paths))
    inside = [p for p in wanted if p == LOG_DIR or p.startswith(LOG_DIR + "/")]
    if inside:
        raise ValueError(f"foldline's own {LOG_DIR}/ is never written: {inside}")
    return wanted


def _named_in(stderr: str) -> set[str]:
    """Paths git's error output names (a failed plain apply leaves no unmerged entry)."""
    found = set()
    for line in stderr.splitlines():
        for pattern in _NAMED:
            match = pattern.match(line.strip())
            if match:
                found.add(match.group(1))
    return found
