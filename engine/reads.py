"""The read side of the log: validated arguments, rows from the storage, decoded events.

Backend-neutral: the rows come from ``engine.storage.Storage``; this module checks what
callers ask for and turns rows into ``RecordedEvent``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from engine import chain
from engine.errors import InvalidArgument
from engine.events import EventCodec, RecordedEvent
from engine.machines import Machines, StreamHead
from engine.storage.seam import Storage

MAX_READ_LIMIT = 10_000
MAX_POSITION = (1 << 63) - 1  # SQLite's INTEGER range


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(f"{name} must be an int in {low}..{high}, got {value!r}")


class LogReads:
    """Reads of committed events, mixed into ``Log`` (which sets the attributes)."""

    storage: Storage
    codec: EventCodec
    machines: Machines

    def decode(self, row: Sequence[Any]) -> RecordedEvent:
        return self.codec.recorded(row)

    def read_stream(self, stream_id: str, after_version: int = 0) -> list[RecordedEvent]:
        """Events of one stream with ``version > after_version``, in version order."""
        self.machines.for_stream(stream_id)
        _check_int("after_version", after_version, 0, MAX_POSITION)
        return [self.decode(row) for row in self.storage.stream_rows(stream_id, after_version)]

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """At most ``limit`` events with ``position > after_position``, in position order."""
        _check_int("after_position", after_position, 0, MAX_POSITION)
        _check_int("limit", limit, 1, MAX_READ_LIMIT)
        return [self.decode(row) for row in self.storage.rows_after(after_position, limit)]

    def iter_all(self, after_position: int = 0) -> Iterator[RecordedEvent]:
        """Every event after a position, streamed (replays and rebuilds)."""
        return map(self.decode, self.storage.rows_after(after_position))

    def iter_rows(self, after_position: int = 0) -> Iterator[tuple[Any, ...]]:
        """Raw rows after a position, in position order, payloads undecoded (audits)."""
        return self.storage.rows_after(after_position)

    def hash_at(self, position: int) -> bytes | None:
        """The chain hash stored at a position (None past the head)."""
        return self.storage.hash_at(position)

    def head(self) -> int:
        """The position of the last committed event (0 for an empty log)."""
        return self.storage.max_position()

    def stream_head(self, stream_id: str) -> StreamHead:
        """A stream's committed version and state (version 0, state None if it does not exist)."""
        self.machines.for_stream(stream_id)
        row = self.storage.stream_head(stream_id)
        return StreamHead(stream_id, row[0], row[1]) if row else StreamHead(stream_id, 0, None)

    def verify_chain(self, after: int = 0) -> list[chain.Violation]:
        """Check the hash chain and positions from ``after`` to the head."""
        previous = chain.GENESIS
        if after:
            stored = self.storage.hash_at(after)
            if stored is None:
                return [chain.Violation(after, "missing_row", "no event at the start position")]
            previous = stored
        return list(chain.check_rows(self.storage.rows_after(after), previous, after))
