"""The exclusive lease file beside the log (SPEC §4.2): ``<db>.lease``.

On a network filesystem SQLite's WAL locking is not safe for two hosts, so the gate to writing
is a small file every host can see: claimed create-exclusive, and afterwards only replaced
whole (write a temporary file, fsync, rename over), never edited in place. The log records the
same tenures (``lease.*`` events) for audit and for the epoch fence.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path


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
        """Create the file if nobody has it; False if it exists already."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as handle:
            json.dump(asdict(record), handle)
            handle.flush()
            os.fsync(handle.fileno())
        return True

    def replace(self, record: LeaseRecord) -> None:
        """Write a whole new record atomically (temp file, fsync, rename)."""
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with open(temporary, "w") as handle:
            json.dump(asdict(record), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)

    def confirm_takeover(self, record: LeaseRecord, pause_s: float) -> bool:
        """Write our claim, pause, and say whether it is still there (SPEC §4.2: confirm,
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
