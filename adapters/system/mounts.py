"""Where a path lies: the mount it is on, and whether hosts share it over a network (ADR 0042).

The mounts are read from ``/proc/self/mountinfo``, whose lines are ``ID PARENT MAJ:MIN ROOT
POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER``; the kernel escapes a space, tab, newline
and backslash in a path or source as octal (``\\040``). The mount of a path is the one whose
mount point is the longest prefix of it, the top one where several are stacked on one point.

Which types count as shared over a network (``NETWORK_TYPES``, ``NETWORK_FUSE``): the types
whose clients on several hosts see one tree, where SQLite's WAL is safe only while one host
has the log open. AWS EFS is NFS: mounted with efs-utils it is listed as ``nfs4``, its source
``127.0.0.1:/`` when the TLS tunnel carries it; ``efs`` itself is only the mount helper's
name (and the kernel's type of that name is SGI's old CD-ROM file system). A FUSE mount is
listed as ``fuse.<subtype>``; a bare ``fuse`` or an unlisted subtype says nothing about
where its data lives and counts as local. So do ``virtiofs`` (one host's directory shared
into its own guests) and everything else not listed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# The table this process reads; a test launcher may point it at a file of its own.
MOUNTINFO = "/proc/self/mountinfo"

NETWORK_TYPES = frozenset(
    {
        "nfs",  # NFS v2/v3
        "nfs4",  # NFS v4, AWS EFS (efs-utils), Azure Files NFS, Filestore
        "cifs",  # SMB
        "smb3",  # SMB 3, when mounted under the kernel's alias for cifs
        "9p",  # Plan 9 (QEMU and WSL host shares): no shared memory between its clients
        "ceph",  # CephFS, the kernel client
        "afs",  # kAFS and OpenAFS
        "lustre",  # cluster file systems of HPC sites
        "gpfs",
        "beegfs",
        "gfs2",  # one shared block device mounted by several hosts at once
        "ocfs2",
    }
)
NETWORK_FUSE = frozenset(
    {"sshfs", "s3fs", "gcsfuse", "rclone", "glusterfs", "ceph-fuse", "juicefs"}
)

_OCTAL = re.compile(r"\\([0-7]{3})")


def unescape(field: str) -> str:
    """A mountinfo path or source field with its octal escapes (``\\040``, ``\\134``) undone."""
    return _OCTAL.sub(lambda match: chr(int(match.group(1), 8)), field)


@dataclass(frozen=True)
class Mount:
    """One line of the table: its id and parent's, what of its file system it shows (``root``)
    at which ``point``, the file system's type and its source."""

    mount_id: int
    parent_id: int
    root: str
    point: str
    fstype: str
    source: str

    @property
    def is_network(self) -> bool:
        """Whether its type is one that hosts share over a network (the module's lists)."""
        kind, _, subtype = self.fstype.partition(".")
        if kind == "fuse" and subtype:
            return subtype in NETWORK_FUSE
        return self.fstype in NETWORK_TYPES

    def describe(self) -> str:
        """``nfs4 (127.0.0.1:/ at /mnt/efs)``: for a boot line."""
        return f"{self.fstype} ({self.source} at {self.point})"


def parse(text: str) -> list[Mount]:
    """Every mount of a mountinfo table, in its order.

    Raises:
        ValueError: a line is not a mountinfo line (too few fields, no ``-`` separator).
    """
    table = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split(" ")
        try:
            separator = fields.index("-", 6)
            fstype, source = fields[separator + 1], fields[separator + 2]
            table.append(
                Mount(
                    int(fields[0]),
                    int(fields[1]),
                    unescape(fields[3]),
                    unescape(fields[4]),
                    unescape(fstype),
                    unescape(source),
                )
            )
        except (ValueError, IndexError):
            raise ValueError(f"line {number} is not a mountinfo line: {line[:120]!r}") from None
    return table


def _is_under(path: str, point: str) -> bool:
    return point == "/" or path == point or path.startswith(point.rstrip("/") + "/")


def mount_of(path: str, table: Sequence[Mount]) -> Mount | None:
    """The mount ``path`` (absolute, symlinks resolved) lies on: the longest mount point that
    is a prefix of it, the top of a stack (a mount no other on that point sits on) where
    several share it. None when no mount covers it (a table of another view)."""
    candidates = [mount for mount in table if _is_under(path, mount.point)]
    if not candidates:
        return None
    longest = max(len(mount.point) for mount in candidates)
    stack = [mount for mount in candidates if len(mount.point) == longest]
    below = {mount.parent_id for mount in stack}
    on_top = [mount for mount in stack if mount.mount_id not in below]
    return (on_top or stack)[-1]


def existing_place(path: Path) -> str:
    """Where a file at ``path`` would be made: its nearest existing ancestor (the file and its
    directory may not exist yet), symlinks resolved."""
    place = Path(os.path.abspath(path))
    while not place.exists() and place != place.parent:
        place = place.parent
    return os.path.realpath(place)


def read_table() -> str:
    """This process's mount table (``MOUNTINFO``).

    Raises:
        OSError: it cannot be read (no ``/proc``).
    """
    with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as handle:
        return handle.read()


def lies_on(path: Path, table_text: str) -> Mount | None:
    """The mount a file at ``path`` lies (or would lie) on, per ``table_text``.

    Raises:
        ValueError: the table has a line that is not a mountinfo line.
    """
    return mount_of(existing_place(path), parse(table_text))
