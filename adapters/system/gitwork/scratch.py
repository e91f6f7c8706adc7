"""The scratch index: trees built and checked out beside the workspace's real index.

``GIT_INDEX_FILE`` pointed elsewhere lets git compute trees from the working tree and write
paths of a tree into it while the real index (what the workspace's owner staged) and HEAD stay
as they are. The scratch file may lie inside the agent-controlled ``.git`` directory, where the
server must not delete anything itself, so it is emptied through git when done instead; its
leftover content never matters, since every use starts by emptying it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from adapters.system.gitwork.runner import Git


class Scratch:
    """One scratch index file in use for one operation (not shared by concurrent ones)."""

    def __init__(self, git: Git, workspace: Path, path: Path, start: str | None = None) -> None:
        self.git, self.workspace, self.path = git, workspace, path
        self.start = start

    def __enter__(self) -> Scratch:
        # Reading a tree without merging replaces the whole index, as emptying it does.
        self.run(["read-tree", self.start] if self.start else ["read-tree", "--empty"])
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        # Not checked: a failure here must not hide the one that ended the operation.
        self.run(["read-tree", "--empty"], check=False)

    def run(self, args: Sequence[str], *, input: bytes | None = None, check: bool = True) -> bytes:
        return self.git.run(args, self.workspace, input=input, index=self.path, check=check)

    def write_tree(self) -> str:
        return self.run(["write-tree"]).decode().strip()

    def load(self, records: Mapping[str, bytes]) -> str:
        """Replace the scratch index by ``records`` (path -> ``b"<mode> <oid>"``); its tree."""
        self.run(["read-tree", "--empty"])
        self.put(records)
        return self.write_tree()

    def put(self, records: Mapping[str, bytes]) -> None:
        """Add ``records`` (path -> ``b"<mode> <oid>"``) to the scratch index, each replacing
        the entry at its path, if any."""
        info = b"".join(
            record + b"\t" + path.encode("utf-8", "surrogateescape") + b"\0"
            for path, record in records.items()
        )
        self.run(["update-index", "-z", "--index-info"], input=info)

    def placeholder(self) -> bytes:
        """An index record (the empty blob) for a path whose working-tree file is to be
        removed or compared as absent: unlike a missing entry, it makes git look there."""
        oid = self.run(["hash-object", "-w", "--stdin"], input=b"").decode().strip()
        return b"100644 " + oid.encode()


def entries(git: Git, workspace: Path, tree: str, paths: Sequence[str]) -> dict[str, bytes]:
    """``tree``'s records at ``paths`` (path -> ``b"<mode> <oid>"``); an absent path is left out.

    The whole tree is listed and filtered here, because ``ls-tree`` takes paths as prefixes
    and a long list of them as argv could exceed the system's limit.
    """
    wanted = set(paths)
    found: dict[str, bytes] = {}
    listing = git.run(["ls-tree", "-r", "-z", "--full-tree", tree], workspace)
    for record in listing.split(b"\0"):
        meta, _, name = record.partition(b"\t")
        path = name.decode("utf-8", "surrogateescape")
        if path in wanted:
            mode, _, rest = meta.partition(b" ")
            found[path] = mode + b" " + rest.partition(b" ")[2]
    return found


def layers(paths: Sequence[str]) -> list[list[str]]:
    """``paths`` split into groups none of which holds both a path and one below it (``a`` and
    ``a/b``), which an index cannot; deepest paths come first."""
    remaining = sorted(set(paths), key=lambda p: (-p.count("/"), p))
    groups: list[list[str]] = []
    while remaining:  # each round takes at least the first path left
        files: set[str] = set()
        dirs: set[str] = set()
        left: list[str] = []
        for path in remaining:
            above = parents(path)
            if path in dirs or path in files or any(d in files for d in above):
                left.append(path)
                continue
            files.add(path)
            dirs.update(above)
        groups.append(sorted(files))
        remaining = left
    return groups


def parents(path: str) -> list[str]:
    """The directories above ``path``, outermost first (``a/b/c``: ``a``, ``a/b``)."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
