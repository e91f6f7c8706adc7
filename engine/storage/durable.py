"""Making a file's name survive a power cut: the fsync of the directory that holds it.

An ``fsync`` of a file makes its bytes durable, not its name: on Linux (ext4, xfs) a file just
created, linked or renamed into a directory can vanish after a power cut until that directory
is synced too (fsync(2): "an explicit fsync() on a file descriptor for the directory is also
needed"). SQLite syncs the directory of a new WAL or journal itself, but not of a new
database file. Every file foldline creates and then relies on across a crash (the log, a
copy's target, and the adapters' files beside them, listed in ADR 0055) is named durably
through ``fsync_dir`` after it is made.
"""

from __future__ import annotations

import os
from pathlib import Path

# Windows cannot open a directory as a file, and NTFS journals its names itself.
NEEDS_DIRECTORY_SYNC = os.name != "nt"


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Sync ``directory``'s entries (names created, renamed or unlinked in it) to disk.

    A no-op where the platform has no directory sync (``NEEDS_DIRECTORY_SYNC``).

    Raises:
        OSError: the directory cannot be opened or synced (EIO: the disk failed).
    """
    if not NEEDS_DIRECTORY_SYNC:
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_parent(path: str | os.PathLike[str]) -> None:
    """``fsync_dir`` of the directory holding ``path``: make its name durable.

    Raises:
        OSError: as ``fsync_dir``.
    """
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def make_dirs(directory: str | os.PathLike[str], mode: int = 0o777) -> None:
    """``mkdir -p directory``, each directory it makes named durably in its parent.

    Raises:
        OSError: a directory cannot be made or synced.
    """
    missing = []
    folder = Path(directory).absolute()
    while not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        # Made by another process meanwhile: its name may not be durable yet either.
        made.mkdir(mode, exist_ok=True)
        fsync_parent(made)


__all__ = ["NEEDS_DIRECTORY_SYNC", "fsync_dir", "fsync_parent", "make_dirs"]
