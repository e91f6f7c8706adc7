"""The anchor: what this server last saw of its log, kept outside the workspace (ADR 0029).

A run that cleans its workspace (``git clean -xfd``, ``rm -rf``) can take the log with it, and
a new empty log in its place would verify as a perfectly good log that never held anything.
So the server keeps, under its state directory (``FOLDLINE_STATE_DIR``), a small file per log:
the log file's device and inode and the position, chain hash and time of its head. It is
written when this process takes the lease, at every renewal and at release, replaced whole.

At the next activation a log that does not extend its anchor (the file is gone, shorter, or
holds another hash at the anchored position) is refused with ``log_missing`` before anything
is created or written, unless the server was started with ``--new-log``: then the new log's
holder records ``lease.new_log`` naming what was lost, and the anchor follows the new log.
The file is a checkpoint ``foldline verify --against`` accepts.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

import msgspec

from engine.audit.anchor import SERVER_FORMAT, ServerAnchor
from engine.domain import commands as c
from engine.domain.lease import LostLog
from engine.errors import LogMissing
from engine.storage.durable import fsync_dir
from projections import queries


def anchor_file(state_dir: Path, db: Path) -> Path:
    """The anchor of the log at ``db``: one file per log path under the state directory."""
    key = hashlib.sha256(os.fsencode(db)).hexdigest()[:16]
    return state_dir / "anchors" / f"{key}.json"


def read(path: Path) -> ServerAnchor | None:
    """The anchor, None if there is none yet.

    Raises:
        LogMissing: the file is there but unreadable: nothing can be judged against it.
    """
    try:
        return msgspec.json.decode(path.read_bytes(), type=ServerAnchor)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError) as ex:
        raise LogMissing(f"the log's anchor {path} cannot be read: {ex}") from ex


def head_of(conn: Any, db: Path) -> ServerAnchor | None:
    """The anchor of the log's current head (None while the log is empty)."""
    head = queries.head_mark(conn)
    if head is None:
        return None
    stat = os.stat(db)
    return ServerAnchor(
        SERVER_FORMAT,
        head.position,
        bytes(head.hash).hex(),
        head.recorded_at,
        str(db),
        stat.st_dev,
        stat.st_ino,
    )


def write(path: Path, anchor: ServerAnchor) -> None:
    """Replace the anchor whole: a temporary file, fsynced, renamed over (0600; its
    directory 0700, so only the server's user reads it)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(descriptor, msgspec.json.format(msgspec.json.encode(anchor), indent=2) + b"\n")
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)
    fsync_dir(path.parent)  # the new anchor, not the old one, after a power cut (ADR 0055)


def missing_reason(anchor: ServerAnchor, db: Path, conn: Any | None) -> str | None:
    """Why the log at ``db`` (open on ``conn``, None: not there) does not extend ``anchor``;
    None when it does."""
    if conn is None:
        return f"{db} is gone"
    there = queries.mark_at(conn, anchor.position)
    if there is None:
        return f"{db} does not reach position {anchor.position}"
    if bytes(there.hash).hex() != anchor.hash or there.recorded_at != anchor.recorded_at:
        return f"{db} holds another event at position {anchor.position}"
    return None


def refusal(anchor: ServerAnchor, reason: str, path: Path) -> LogMissing:
    return LogMissing(
        f"{reason}, but its anchor {path} says the log held {anchor.position} events"
        f" (hash {anchor.hash[:16]}...): refusing to start a new log in its place;"
        " restore it, or start anew with foldline serve --new-log"
    )


def new_log_command(anchor: ServerAnchor, holder: str, epoch: int) -> c.RecordNewLog:
    """``lease.new_log``: what the holder of a new log records of the anchor it lost."""
    lost = LostLog(
        anchor.db, anchor.device, anchor.inode, anchor.position, anchor.hash, anchor.recorded_at
    )
    return c.RecordNewLog(
        holder=holder, epoch=epoch, lost=lost, command_id=f"new-log:{anchor.position}:{anchor.hash}"
    )
