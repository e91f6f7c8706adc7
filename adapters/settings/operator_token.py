"""The operator token: ``FOLDLINE_TOKEN``, or a random one kept in a 0600 file beside the log.

The file (``ServerConfig.operator_token_file``) is made at the server's first activation, never
at boot (design.md §4.2: nothing under the workspace exists before the first request that needs it),
in a directory runs cannot read. Several gunicorn workers may activate at the same moment, so
it is made race-free: a temporary file, fsynced, then ``os.link`` to the final name, which
fails for all but the first (they read the winner's). Workers re-read it when its inode or
mtime changes, so ``foldline token --rotate`` (a new file renamed over the old) needs no
restart.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from pathlib import Path

from adapters.settings.config import ServerConfig
from engine.storage.durable import fsync_dir


class OperatorToken:
    """This process's view of the operator token (thread-safe)."""

    def __init__(self, config: ServerConfig) -> None:
        self.fixed = config.token  # FOLDLINE_TOKEN: no file at all
        self.path = config.operator_token_file
        self._lock = threading.Lock()
        self._seen: tuple[int, int] | None = None
        self._value: str | None = None

    def ensure(self) -> None:
        """Make the file unless ``FOLDLINE_TOKEN`` is set or it exists (first activation).

        Raises:
            OSError: the directory cannot be made or written.
        """
        if self.fixed is None and not self.path.exists():
            create(self.path)

    def current(self) -> str | None:
        """The token, or None while there is none (no file yet, or an empty one): then no
        bearer is the operator's. One ``stat`` per call; the file is read when it changed."""
        if self.fixed is not None:
            return self.fixed
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None
        seen = (info.st_ino, info.st_mtime_ns)
        with self._lock:
            if seen != self._seen:
                with contextlib.suppress(FileNotFoundError):  # rotated away meanwhile: next call
                    self._value = self.path.read_text().strip() or None
                    self._seen = seen
            return self._value


def create(path: Path) -> str:
    """Write a new token to ``path`` unless another process did first; return the one on file.

    Raises:
        OSError: the directory cannot be made or written.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = _write_temporary(path)
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass  # another worker won the race: its token is the one
    finally:
        temporary.unlink()
    fsync_dir(path.parent)
    return path.read_text().strip()


def rotate(path: Path) -> str:
    """Replace the token on file with a new one, atomically (rename over it); return it."""
    temporary = _write_temporary(path)
    os.replace(temporary, path)
    fsync_dir(path.parent)
    return path.read_text().strip()


def _write_temporary(path: Path) -> Path:
    """A new random token in a 0600 file beside ``path``, on disk before it is named."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (secrets.token_urlsafe(32) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return temporary
