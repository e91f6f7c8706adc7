"""The exclusive lease file beside the log (design.md §4.2): ``<db>.lease``.

On a network filesystem SQLite's WAL locking is not safe for two hosts, so the gate to writing
is a small file every host can see: claimed create-exclusive (a whole record linked into
place), and afterwards only replaced whole (write a temporary file, fsync, rename over), never
edited in place. The log records the same tenures (``lease.*`` events) for audit and for the
epoch fence.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.storage.durable import fsync_dir


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    epoch: int
    host: str
    pid: int
    renewed_at: float  # wall-clock seconds, for people; staleness is judged on local clocks


class LeaseFile:
    def __init__(self, db: Path) -> None:
        self.path = db.with_name(db.name + ".lease")

    def read(self) -> LeaseRecord | None:
        """The current record; None if there is none. An unreadable file counts as held by
        nobody known (holder ``"?"``), so it can only be taken over, never ignored."""
        try:
            data = json.loads(self.path.read_text())
            return LeaseRecord(**data)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError):
            return LeaseRecord(holder="?", epoch=0, host="", pid=0, renewed_at=0.0)

    def claim(self, record: LeaseRecord) -> bool:
        """Create the file if nobody has it; False if it exists already.

        The record is written whole to a file of our own first and then linked into place
        (``link`` fails when the name exists): a file created empty and written after would
        be read, for a moment, as unreadable, held by nobody known (``read``), and another
        worker of this very instance would take it for another server's claim."""
        temporary = self._written(record)
        try:
            os.link(temporary, self.path)
        except FileExistsError:
            return False
        finally:
            os.unlink(temporary)
        fsync_dir(self.path.parent)  # the claim's name survives a power cut (ADR 0055)
        return True

    def replace(self, record: LeaseRecord) -> None:
        """Write a whole new record atomically (temp file, fsync, rename, directory fsync).

        Raises:
            OSError: the record could not be put in place (no temporary file is left behind).
        """
        temporary = self._written(record)
        try:
            os.replace(temporary, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        fsync_dir(self.path.parent)

    def _written(self, record: LeaseRecord) -> Path:
        """A file of this process's own beside the lease file, holding ``record`` on disk."""
        name = f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        temporary = self.path.with_name(name)
        with open(temporary, "w") as handle:
            json.dump(asdict(record), handle)
            handle.flush()
            os.fsync(handle.fileno())
        return temporary

    def confirm_takeover(self, record: LeaseRecord, pause_s: float) -> bool:
        """Write our claim, pause, and say whether it is still there (design.md §4.2: confirm,
        then open): a contender that wrote after us has won the file."""
        self.replace(record)
        time.sleep(pause_s)
        confirmed = self.read()
        return confirmed is not None and confirmed.holder == record.holder

    def remove(self, holder: str) -> None:
        """Give the file up, if it is still ``holder``'s."""
        current = self.read()
        if current is not None and current.holder == holder:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
