"""The hash chain that makes any edit of history detectable.

``hash(n) = sha256(hash(n-1) || envelope(n) || payload(n))`` where ``envelope`` is the JSON
array of the row's envelope columns. A JSON array is self-delimiting, so the concatenation is
unambiguous. The chain starts from the fixed ``GENESIS`` value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import eq, itemgetter
from typing import Any

import msgspec

GENESIS = hashlib.sha256(b"foldline genesis v1").digest()

_encode = msgspec.json.encode

# position, stream_id, version, event_type, recorded_at, epoch, command_id, state, payload, hash
Row = tuple[int, str, int, str, str, int, str | None, str, bytes, bytes]


def link(
    previous: bytes,
    position: int,
    stream_id: str,
    version: int,
    event_type: str,
    recorded_at: str,
    epoch: int,
    command_id: str | None,
    state: str,
    payload: bytes,
) -> bytes:
    """The chain hash of one row, given the hash of the row before it."""
    envelope = _encode(
        [position, stream_id, version, event_type, recorded_at, epoch, command_id, state]
    )
    return hashlib.sha256(b"".join((previous, envelope, payload))).digest()


def linked_row(previous: bytes, *columns: Any) -> Row:
    """One ``events`` row as the write path stores it: ``columns`` (a ``Row``'s first nine, in
    column order) followed by their chain hash from ``previous``, the hash ``link`` gives."""
    envelope = _encode(columns[:8])  # a tuple encodes as the list ``link`` encodes
    return (*columns, hashlib.sha256(b"".join((previous, envelope, columns[8]))).digest())


_envelope = itemgetter(0, 1, 2, 3, 4, 5, 6, 7)
_payload, _hash, _previous = itemgetter(8), itemgetter(9), itemgetter(10)
_digest = type(hashlib.sha256()).digest
_sha256 = hashlib.sha256
_join = b"".join


def links_hold(rows: Sequence[Any]) -> bool:
    """True when every row (a ``Row`` followed by the hash stored at the position before it)
    holds the chain hash of its content from that previous hash: ``link`` on each row, every
    step run by C code, without a Python call per row. False proves nothing (a previous hash
    missing, a column of the wrong type, or a link that does not check): ``check_rows`` says
    which."""
    try:
        preimages = map(
            _join,
            zip(
                map(_previous, rows),
                map(_encode, map(_envelope, rows)),
                map(_payload, rows),
                strict=True,
            ),
        )
        computed = map(_digest, map(_sha256, preimages))
        return all(map(eq, computed, map(_hash, rows)))
    except TypeError:
        return False


@dataclass(frozen=True)
class Violation:
    """One thing wrong with a log, at a position."""

    position: int
    kind: str
    detail: str


def check_rows(
    rows: Iterable[Row], previous: bytes = GENESIS, after: int = 0
) -> Iterator[Violation]:
    """Check positions are gap-free and every hash links to the one before.

    ``rows`` are in position order starting right after ``after``; ``previous`` is the hash
    stored at ``after``. After a broken link the stored hash is trusted again, so one edit is
    reported once rather than at every later row.
    """
    expected_position = after + 1
    for row in rows:
        position = row[0]
        if position != expected_position:
            yield Violation(
                expected_position,
                "position_gap",
                f"expected position {expected_position}, found {position}",
            )
        payload = row[8] if isinstance(row[8], bytes) else str(row[8]).encode()
        computed = link(previous, *row[:8], payload)
        if computed != row[9]:
            yield Violation(position, "hash_mismatch", "stored hash does not match the chain")
        previous = row[9]
        expected_position = position + 1
