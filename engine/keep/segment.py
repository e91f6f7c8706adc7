"""A sealed segment: the archived events of one cut, compressed, with what proves them.

A segment file holds a header and the rows of positions ``first..last`` exactly as the log
stored them (the ``events`` columns, payload bytes and chain hashes untouched), encoded with
msgpack and compressed with LZMA (the standard library's xz: archives are written once and
read rarely, so the best ratio the standard library has wins over speed; no dependency). The
header names the checkpoint the cut was made at: its size is ``last``, its tree head the root of
the tree over positions ``1..last`` (this segment's chain hashes after those of the segments
before it), and the hash stored at ``first - 1`` that the first row links from.

Sealed: written to a temporary name, synced, renamed into place, its directory synced
(``engine.storage.durable``), then made read-only. ``read_segment`` checks the rows' chain from
the header's previous hash and the header's own digest of the rows; the tree head needs the
segments before it, which ``engine.keep.archive`` joins.
"""

from __future__ import annotations

import hashlib
import lzma
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from engine import chain
from engine.errors import ChainBroken, InvalidArgument
from engine.storage.durable import fsync_parent

MAGIC = b"foldline-segment v1\n"
SUFFIX = ".segment.xz"


class Header(msgspec.Struct, frozen=True):
    first: int
    last: int
    previous: bytes  # the chain hash stored at first - 1 (GENESIS for the first segment)
    root: bytes  # the tree head over positions 1..last: the checkpoint's
    checkpoint: str  # the checkpoint's text as given (a signed note, or its body)
    rows_sha256: bytes  # of the encoded rows: a damaged file is told from a forged one


@dataclass(frozen=True)
class Segment:
    path: str
    header: Header
    rows: list[tuple[Any, ...]]

    def hashes(self) -> list[bytes]:
        return [bytes(row[9]) for row in self.rows]


def segment_name(first: int, last: int) -> str:
    return f"events-{first:012d}-{last:012d}{SUFFIX}"


def write_segment(
    folder: str | os.PathLike[str],
    rows: list[tuple[Any, ...]],
    previous: bytes,
    root: bytes,
    checkpoint: str,
) -> str:
    """Seal ``rows`` (consecutive positions) into a new segment file in ``folder``; its path.

    Raises:
        InvalidArgument: a segment of that name exists (segments are never overwritten).
        OSError: the file could not be written or synced.
    """
    first, last = rows[0][0], rows[-1][0]
    path = Path(folder) / segment_name(first, last)
    if path.exists():
        raise InvalidArgument(f"{path}: exists; a segment is never overwritten")
    body = msgspec.msgpack.encode([list(row) for row in rows])
    header = Header(first, last, previous, root, checkpoint, hashlib.sha256(body).digest())
    data = MAGIC + lzma.compress(msgspec.msgpack.encode([header, body]), preset=6)
    partial = path.with_suffix(".partial")
    with open(partial, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
    fsync_parent(path)
    os.chmod(path, 0o444)
    return str(path)


def read_segment(path: str | os.PathLike[str]) -> Segment:
    """Read and check a segment: its digest, positions and chain links.

    Raises:
        InvalidArgument: not a segment, or unreadable.
        ChainBroken: its rows are not the ones sealed, or do not link.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as ex:
        raise InvalidArgument(f"segment {os.fspath(path)}: {ex.strerror}") from ex
    if not data.startswith(MAGIC):
        raise InvalidArgument(f"{os.fspath(path)}: not a foldline segment")
    try:
        header_raw, body = msgspec.msgpack.decode(lzma.decompress(data[len(MAGIC) :]))
        header = msgspec.convert(header_raw, Header)
    except (lzma.LZMAError, msgspec.DecodeError, msgspec.ValidationError, ValueError) as ex:
        raise InvalidArgument(f"{os.fspath(path)}: a damaged segment: {ex}") from ex
    if hashlib.sha256(body).digest() != header.rows_sha256:
        raise ChainBroken(f"{os.fspath(path)}: its rows are not the ones it was sealed with")
    rows = [tuple(row) for row in msgspec.msgpack.decode(body)]
    broken = next(iter(chain.check_rows(rows, header.previous, header.first - 1)), None)
    if broken is not None or not rows or rows[-1][0] != header.last:
        where = broken.position if broken else header.last
        raise ChainBroken(f"{os.fspath(path)}: position {where}: its rows do not link")
    return Segment(os.fspath(path), header, rows)
