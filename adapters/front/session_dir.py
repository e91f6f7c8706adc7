"""The base's mount check and ``<base>/<sid>``, built from ``<base>/.template`` and renamed in.

The base (on AgentCore, the file system mounted at the first invocation) must be a mount
point before anything is made on it: a directory made earlier would land on the microVM's own
disk. A session's directory is copied from the template in a dot-named ``.tmp-<16 hex>`` (0700,
no id in the name, so a long id cannot push it past NAME_MAX), handed to the run user, synced,
then renamed in (and its base synced: ADR 0055): a half-copied directory is never served, and
two fronts racing on one id end with one complete directory (the loser's copy is removed).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import secrets
import shutil
from pathlib import Path

from adapters.settings.config import RunUser
from adapters.system.mounts import unescape
from engine.storage.durable import fsync_dir

log = logging.getLogger("foldline.front")
# foldline's state in a workspace: the log, its sidecars, the lease and the operator token all
# live in this directory, so a copy of the template starts a new log of its own.
STATE_DIR = ".foldline"
AT_FDCWD = -100


def mount_points(mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Every mount point of this process's view, as often as it is stacked."""
    with open(mountinfo) as handle:
        return [unescape(line.split()[4]) for line in handle if line.strip()]


def is_mount_point(path: Path, mountinfo: str = "/proc/self/mountinfo") -> bool:
    return str(path) in mount_points(mountinfo)


def ensure(base: Path, sid: str, user: RunUser) -> Path:
    """``<base>/<sid>``, made from the template if missing.

    Raises:
        OSError: the copy, the hand-over or the rename failed (the caller answers 500 and the
            next request tries again).
    """
    target = base / sid
    if target.is_dir():
        return target
    template = base / ".template"
    temporary = base / f".tmp-{secrets.token_hex(8)}"
    try:
        if template.is_dir():
            shutil.copytree(
                template,
                temporary,
                symlinks=True,
                ignore=lambda folder, names: {STATE_DIR} if Path(folder) == template else set(),
            )
            os.chmod(temporary, 0o700)
        else:
            os.mkdir(temporary, 0o700)
        _hand_over(temporary, user)
        _sync_tree(temporary)
        try:
            rename_noreplace(temporary, target)
        except FileExistsError:
            log.info("front: %s was made by another front meanwhile", target)
        # The rename itself, durable before the worker is started on it (ADR 0055).
        fsync_dir(base)
    finally:
        if temporary.exists():
            shutil.rmtree(temporary, ignore_errors=True)
    return target


def rename_noreplace(source: Path, target: Path) -> None:
    """``rename(2)`` that never replaces ``target``, even an empty directory (``renameat2``
    with ``RENAME_NOREPLACE``).

    Raises:
        FileExistsError: ``target`` exists (another front renamed its copy in first).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    done = libc.renameat2(AT_FDCWD, os.fsencode(source), AT_FDCWD, os.fsencode(target), 1)
    if done != 0:
        code = ctypes.get_errno()
        raise (
            OSError(code, os.strerror(code), str(target))
            if code != errno.EEXIST
            else (FileExistsError(code, os.strerror(code), str(target)))
        )


def _sync_tree(root: Path) -> None:
    """Every file and folder of the copy on disk before it is renamed in: after a power cut
    the session's directory is whole, never a name over empty or missing files."""
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue  # a link's target is the template's business; a fifo has no data
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(folder)


def _hand_over(root: Path, user: RunUser) -> None:
    """The copy is the run user's (best effort: an access point that enforces its own owner
    refuses the change, and access still works through it)."""
    try:
        os.chown(root, user.uid, user.gid, follow_symlinks=False)
        for folder, dirs, files in os.walk(root):
            for name in (*dirs, *files):
                with contextlib.suppress(FileNotFoundError):
                    os.chown(Path(folder) / name, user.uid, user.gid, follow_symlinks=False)
    except PermissionError as ex:
        log.warning("front: %s not handed to %s: %s", root, user.name, ex)
