"""A power cut under SQLite: an APSW VFS that remembers what was not synced, and loses it.

Like SQLite's own crash-test VFS (``test6.c``) and Jepsen's LazyFS, but under the log's real
write path: ``Disk`` makes its VFS SQLite's default, so every connection foldline opens (the
writer, the readers, the checkpoint thread, ``copy``'s target) writes through it, unchanged.
Writes go to the real file at once (the process reads what it wrote, as with a page cache);
the VFS also records, per file, every write and truncation since that file's last sync. At a
chosen operation (the N-th write or sync, counted over all files) the power goes: that
operation and every later one fail with an I/O error, so nothing is acknowledged after it.
``reboot`` then rewrites each file as a disk could have kept it:

- ``drop``: only what was synced;
- ``torn``: what was synced, plus each unsynced write torn at 512-byte sectors (each sector of
  it kept or lost on its own; bytes outside a write are never touched: SQLite's unix VFS
  declares power-safe overwrite);
- ``reorder``: what was synced, plus any subset of the unsynced writes (later writes kept while
  earlier ones are lost: the disk wrote them out of order).

Directory entries are modelled as a file system without ``dirsync`` keeps them: a folder made
under the root is there after a cut only once its parent was synced after it was made; a file
created (or deleted) is named (or gone) after a power cut only once its directory was synced: by
SQLite's unix VFS at the first sync of a new WAL or journal (``UNIXFILE_DIRSYNC``), by Python
``os.fsync`` of a directory descriptor (foldline's ``fsync_dir``, seen by wrapping ``os.fsync``),
or by a delete SQLite asks to sync. Otherwise ``drop`` loses a new name (or brings a deleted
file back with its synced bytes), and ``torn``/``reorder`` keep or lose it at random. The
``-shm`` index is never durable: SQLite rebuilds it after a crash, so ``reboot`` removes it.

Not modelled: a disk that acknowledges a flush it did not do, firmware, or the file system's
own journal (ADR 0003): only what the POSIX contract lets a kernel lose.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

SECTOR = 512
MODES = ("drop", "torn", "reorder")
NAME = "powercut"
BASE = "unix"
# SQLite's unix VFS syncs the directory at the first sync of a new file of these kinds.
_DIRSYNC_KINDS = (
    apsw.SQLITE_OPEN_WAL | apsw.SQLITE_OPEN_MAIN_JOURNAL | apsw.SQLITE_OPEN_SUPER_JOURNAL
)

Write = tuple[int, bytes]  # (offset, data)
Truncate = int  # the new size
Pending = Write | Truncate


class PowerIsOff(apsw.IOError):  # type: ignore[misc]
    """What every file operation raises once the power is cut."""


@dataclass
class FileModel:
    """One path as a disk knows it: the bytes synced, the changes since, and its name."""

    durable: bytearray
    named: bool  # the directory entry is durable
    pending: list[Pending] = field(default_factory=list)
    deleted: bool = False  # deleted by the process, not yet durably
    ghost: bytes | None = None  # what a not-yet-durable delete of this name would bring back


def _apply(buffer: bytearray, change: Pending) -> None:
    if isinstance(change, int):
        del buffer[change:]
        buffer.extend(bytes(max(0, change - len(buffer))))
        return
    offset, data = change
    if len(buffer) < offset:
        buffer.extend(bytes(offset - len(buffer)))
    buffer[offset : offset + len(data)] = data


def _sectors(offset: int, data: bytes) -> list[Write]:
    """A write as the sector-aligned pieces a disk writes atomically each."""
    pieces = []
    at = offset
    while at < offset + len(data):
        end = min(offset + len(data), (at // SECTOR + 1) * SECTOR)
        pieces.append((at, data[at - offset : end - offset]))
        at = end
    return pieces


class Disk:
    """The files under ``root`` as a power cut would leave them, and the cut itself.

    ``cut_at``: the 1-based index of the write or sync (over all files) that the power
    fails at; None: only counted (a dry run), or cut by ``cut_now``.
    """

    def __init__(self, root: Path, cut_at: int | None, mode: str, rng: random.Random) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.root = str(root.resolve())
        self.cut_at = cut_at
        self.mode = mode
        self.rng = rng
        self.operations = 0
        self.cut_time: float | None = None  # time.monotonic() of the cut
        self.files: dict[str, FileModel] = {}
        self.lock = threading.RLock()
        # Folders: those there before the run are durable; one made since is named durably
        # once its parent is synced with it already there.
        self.folders_before = {str(p) for p in Path(self.root).rglob("*") if p.is_dir()}
        self.durable_folders: set[str] = set()

    @property
    def is_cut(self) -> bool:
        return self.cut_time is not None

    def tracks(self, path: str) -> bool:
        return path.startswith(self.root + os.sep)

    def tick(self) -> None:
        """Count one write or sync; raises PowerIsOff at and after the cut."""
        with self.lock:
            if self.is_cut:
                raise PowerIsOff("the power is off")
            self.operations += 1
            if self.operations == self.cut_at:
                self.cut_time = time.monotonic()
                raise PowerIsOff("the power failed here")

    def cut_now(self) -> None:
        """Cut the power now (after the last operation), if it has not failed already."""
        with self.lock:
            if not self.is_cut:
                self.cut_time = time.monotonic()

    def dead(self) -> None:
        if self.is_cut:
            raise PowerIsOff("the power is off")

    # -- what the VFS reports ------------------------------------------------------------

    def opened(self, path: str) -> FileModel:
        with self.lock:
            model = self.files.get(path)
            if model is not None and not model.deleted:
                return model
            if model is None and os.path.exists(path):  # there before: synced by the setup
                model = FileModel(bytearray(Path(path).read_bytes()), named=True)
            else:  # created now; a deleted name not yet durable may come back instead
                ghost = bytes(model.durable) if model is not None and model.named else None
                model = FileModel(bytearray(), named=False, ghost=ghost)
            self.files[path] = model
            return model

    def wrote(self, path: str, change: Pending) -> None:
        with self.lock:
            self.files[path].pending.append(change)

    def synced(self, path: str) -> None:
        with self.lock:
            model = self.files[path]
            for change in model.pending:
                _apply(model.durable, change)
            model.pending.clear()

    def deleted(self, path: str, durably: bool) -> None:
        with self.lock:
            model = self.files.get(path)
            if model is None:
                return
            model.deleted = True
            if durably or not model.named:
                # Never durably named: after a cut it is gone whatever happens now.
                del self.files[path]

    def directory_synced(self, directory: str) -> None:
        """Every entry made or removed in ``directory`` so far is durable now."""
        with self.lock:
            with os.scandir(directory) as entries:
                self.durable_folders.update(e.path for e in entries if e.is_dir())
            for path, model in list(self.files.items()):
                if os.path.dirname(path) != directory:
                    continue
                if model.deleted:
                    del self.files[path]
                else:
                    model.named = True
                    model.ghost = None

    # -- after the cut -------------------------------------------------------------------

    def reboot(self) -> dict[str, str]:
        """Rewrite every file as the disk kept it; returns what became of each (for messages).

        Call once every connection is closed and the VFS is no longer the default.
        """
        fates = {}
        lost = []
        for folder in sorted(Path(self.root).rglob("*"), key=lambda p: len(p.parts)):
            name = str(folder)
            if not folder.is_dir() or name in self.folders_before | self.durable_folders:
                continue
            if any(name.startswith(gone + os.sep) for gone in lost) or not self._keeps():
                lost.append(name)
        for path, model in sorted(self.files.items()):
            if any(path.startswith(gone + os.sep) for gone in lost):
                continue
            fates[path] = self._restore(path, model)
        for gone in lost:
            shutil.rmtree(gone, ignore_errors=True)
            fates[gone] = "folder lost"
        for shm in Path(self.root).rglob("*-shm"):
            shm.unlink()
        return fates

    def _keeps(self) -> bool:
        """Whether something not synced survives: never under ``drop``, by chance otherwise."""
        return self.mode != "drop" and self.rng.random() < 0.5

    def _restore(self, path: str, model: FileModel) -> str:
        if model.deleted:
            if self._keeps():
                return self._write(path, None)
            return self._write(path, bytes(model.durable))  # the delete was lost
        if not model.named and not self._keeps():
            return self._write(path, model.ghost)  # the new name was lost
        content = bytearray(model.durable)
        kept = 0
        for change in model.pending:
            if self.mode == "torn" and not isinstance(change, int):
                pieces = [p for p in _sectors(*change) if self.rng.random() < 0.5]
                for piece in pieces:
                    _apply(content, piece)
                kept += bool(pieces)
            elif self._keeps():
                _apply(content, change)
                kept += 1
        note = f"{len(model.pending)} unsynced, {kept} kept"
        return self._write(path, bytes(content), note)

    @staticmethod
    def _write(path: str, content: bytes | None, note: str = "") -> str:
        if content is None:
            Path(path).unlink(missing_ok=True)
            return "absent"
        Path(path).write_bytes(content)
        return f"{len(content)} bytes" + (f" ({note})" if note else "")


class _File(apsw.VFSFile):  # type: ignore[misc]
    def __init__(self, disk: Disk, path: str | None, name: Any, flags: list[int]) -> None:
        super().__init__(BASE, name, flags)
        self._disk = disk if path is not None else None
        self._path = path or ""
        # unixSync's UNIXFILE_DIRSYNC: a new WAL or journal syncs its directory once.
        self._readonly = bool(flags[0] & apsw.SQLITE_OPEN_READONLY)
        self._dirsync = bool(flags[0] & apsw.SQLITE_OPEN_CREATE and flags[0] & _DIRSYNC_KINDS)

    def xLock(self, level: int) -> None:
        try:
            super().xLock(level)
        except apsw.IOError as ex:
            # A read-only connection's close asks for the write lock it cannot have: the
            # unix VFS answers SQLITE_IOERR_LOCK, which SQLite ignores there, but apsw would
            # raise it from ``close``. As busy it is ignored through apsw too.
            if not self._readonly or ex.extendedresult != apsw.SQLITE_IOERR_LOCK:
                raise
            raise apsw.BusyError("a read-only file cannot be write-locked") from ex

    def xRead(self, amount: int, offset: int) -> bytes:
        if self._disk is not None:
            self._disk.dead()
        data: bytes = super().xRead(amount, offset)
        return data

    def xWrite(self, data: bytes, offset: int) -> None:
        disk = self._disk
        if disk is None:
            super().xWrite(data, offset)
            return
        with disk.lock:
            disk.tick()
            super().xWrite(data, offset)
            disk.wrote(self._path, (offset, bytes(data)))

    def xTruncate(self, newsize: int) -> None:
        disk = self._disk
        if disk is None:
            super().xTruncate(newsize)
            return
        with disk.lock:
            disk.tick()
            super().xTruncate(newsize)
            disk.wrote(self._path, newsize)

    def xSync(self, flags: int) -> None:
        disk = self._disk
        if disk is None:
            super().xSync(flags)
            return
        with disk.lock:
            disk.tick()
            super().xSync(flags)
            disk.synced(self._path)
            if self._dirsync:
                self._dirsync = False
                disk.directory_synced(os.path.dirname(self._path))


class PowerCutVFS(apsw.VFS):  # type: ignore[misc]
    """The VFS over the unix one; files under the active ``Disk``'s root are recorded."""

    def __init__(self) -> None:
        super().__init__(NAME, BASE)
        self.disk: Disk | None = None

    def xOpen(self, name: Any, flags: list[int]) -> _File:
        disk = self.disk
        path = None
        if disk is not None and name is not None:
            text = name.filename() if isinstance(name, apsw.URIFilename) else str(name)
            text = os.path.abspath(text)
            if disk.tracks(text) and not text.endswith("-shm"):
                disk.dead()
                path = text
                disk.opened(path)
        return _File(disk, path, name, flags)

    def xDelete(self, filename: str, syncdir: bool) -> None:
        disk = self.disk
        path = os.path.abspath(filename)
        if disk is None or not disk.tracks(path):
            super().xDelete(filename, syncdir)
            return
        with disk.lock:
            disk.dead()
            super().xDelete(filename, syncdir)
            disk.deleted(path, durably=bool(syncdir))


_VFS: PowerCutVFS | None = None


def _vfs() -> PowerCutVFS:
    global _VFS
    if _VFS is None:
        _VFS = PowerCutVFS()
    return _VFS


class PowerCut:
    """``with PowerCut(disk):`` every SQLite file opened in the block writes through ``disk``.

    On leaving, the default VFS is the unix one again. The caller closes every connection
    it opened inside first, then calls ``disk.reboot()``.
    """

    def __init__(self, disk: Disk) -> None:
        self.disk = disk
        self._fsync: Callable[[int], None] = os.fsync

    def __enter__(self) -> Disk:
        vfs = _vfs()
        if vfs.disk is not None:
            raise RuntimeError("one power cut at a time")
        vfs.disk = self.disk
        apsw.set_default_vfs(NAME)
        real = self._fsync
        disk = self.disk

        def fsync(fd: int) -> None:
            # A Python fsync of a directory (fsync_dir): its entries become durable.
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                directory = os.readlink(f"/proc/self/fd/{fd}")
                if disk.tracks(os.path.join(directory, "")):
                    if disk.is_cut:
                        raise OSError(errno.EIO, "the power is off")
                    real(fd)
                    disk.directory_synced(directory)
                    return
            real(fd)

        os.fsync = fsync
        return self.disk

    def __exit__(self, *exc: object) -> None:
        os.fsync = self._fsync
        apsw.set_default_vfs(BASE)
        _vfs().disk = None


__all__ = ["MODES", "SECTOR", "Disk", "FileModel", "PowerCut", "PowerIsOff"]
