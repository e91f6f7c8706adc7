"""The Merkle tree over a log: its leaves are the chain hashes stored at positions 1..n.

Leaf ``i`` (from 0) is the event at position ``i + 1``, and its leaf data is that event's stored
``hash`` (32 raw bytes), so the tree commits to the chain, and the chain to every row. The
leaves are read through an audit ``Reader`` (``engine.audit.source``; a PostgreSQL log through
the reader ``adapters.log_sources`` opens), read-only: nothing is ever written to the log.

``LogTree`` answers ``subtree(start, end)`` for ``engine.audit.merkle`` from memory: it hashes
every leaf once, builds the perfect levels above them, and memoizes the imperfect right-edge
heads, so a proof over 10^5 events takes a fraction of a second. The seam for what comes next
is that oracle: a store of interior nodes kept by the append path (or a checkpointer) can
answer the same ``subtree`` calls from a few rows, for millisecond proofs at 10^6 events,
without touching the proof code.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.audit import merkle
from engine.audit.source import Reader
from engine.errors import InvalidArgument


def read_leaves(reader: Reader, start: int, end: int) -> list[bytes]:
    """The leaf data of leaves ``[start, end)``: the chain hashes of positions start+1..end.

    Raises:
        InvalidArgument: the log does not hold every one of those positions.
    """
    rows = reader.rows(
        "SELECT position, hash FROM events WHERE position > ? AND position <= ? ORDER BY position",
        (start, end),
    )
    hashes: list[bytes] = []
    for expected, (position, digest) in enumerate(rows, start + 1):
        if position != expected:
            raise InvalidArgument(f"{reader.path}: position {expected} is missing from the log")
        hashes.append(bytes(digest))
    if len(hashes) != end - start:
        raise InvalidArgument(f"{reader.path}: the log holds fewer than {end} events")
    return hashes


class LogTree:
    """The tree over ``size`` leaves, held in memory; ``subtree`` is the proofs' oracle."""

    def __init__(self, leaf_data: Sequence[bytes]) -> None:
        level = [merkle.leaf_hash(data) for data in leaf_data]
        self.size = len(level)
        self._levels = [level]
        node_hash = merkle.node_hash
        while len(level) > 1:
            level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            self._levels.append(level)
        self._heads: dict[tuple[int, int], bytes] = {}

    def leaf_hash(self, index: int) -> bytes:
        return self._levels[0][index]

    def subtree(self, start: int, end: int) -> bytes:
        """The head of leaves ``[start, end)`` (``0 <= start < end <= size``)."""
        width = end - start
        if width & (width - 1) == 0 and start % width == 0:
            return self._levels[width.bit_length() - 1][start // width]
        found = self._heads.get((start, end))
        if found is None:
            k = merkle.split(width)
            found = merkle.node_hash(self.subtree(start, start + k), self.subtree(start + k, end))
            self._heads[(start, end)] = found
        return found

    def root(self, size: int | None = None) -> bytes:
        size = self.size if size is None else size
        self._check(size)
        return self.subtree(0, size) if size else merkle.EMPTY_ROOT

    def inclusion(self, index: int, size: int) -> list[bytes]:
        self._check(size)
        return merkle.inclusion_proof(index, size, self.subtree)

    def consistency(self, old_size: int, new_size: int) -> list[bytes]:
        self._check(new_size)
        return merkle.consistency_proof(old_size, new_size, self.subtree)

    def _check(self, size: int) -> None:
        if not 0 <= size <= self.size:
            raise InvalidArgument(f"size {size}: the log holds {self.size} events")


def open_tree(reader: Reader, size: int | None = None) -> LogTree:
    """The tree over the first ``size`` events of the log (all of them by default).

    Raises:
        InvalidArgument: ``size`` is negative or beyond the log's head.
    """
    head = reader.head()
    size = head if size is None else size
    if not 0 <= size <= head:
        raise InvalidArgument(f"size {size}: the log holds {head} events")
    return LogTree(read_leaves(reader, 0, size))
