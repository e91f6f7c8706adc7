"""The Merkle tree over a log: its leaves are the chain hashes stored at positions 1..n.

Leaf ``i`` (from 0) is the event at position ``i + 1``, and its leaf data is that event's stored
``hash`` (32 raw bytes), so the tree commits to the chain, and the chain to every row. The
leaves are read through a ``Source``, such as an audit ``Reader`` (``engine.audit.source``; a
PostgreSQL log through the reader ``adapters.settings.log_sources`` opens), read-only: nothing
is ever written here.

Proofs ask one oracle, ``subtree(start, end)`` (``engine.merkle.rfc9162``), and two classes
answer it:

- ``StoredTree``, what ``open_tree`` gives: the interior nodes stored in the log's
  ``tree_nodes`` table (``engine.merkle.nodes``: every complete aligned subtree of 256 leaves and
  more, kept lazily by the server) answer the perfect subtrees they cover, with one indexed
  read each; only what they do not cover is hashed from the chain hashes, read on demand by
  small range reads: the block of 256 leaves around a proven leaf, the right edge past the
  last complete block, and anything not stored yet (all of a log whose table is empty, or
  that predates it). A proof at 10^6 events reads a few dozen rows.
- ``LogTree``, held whole in memory from a list of leaf data: the reference the stored tree
  is tested against, and the base whose ``root``, ``inclusion`` and ``consistency`` both share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from engine.errors import InvalidArgument
from engine.merkle import nodes, rfc9162
from engine.merkle.nodes import BLOCK, LOWEST_LEVEL


class Source(Protocol):
    """How the tree reads a log (an audit ``Reader`` is one): where it is, the schema it is at,
    its head, and rows of a query in SQLite's dialect."""

    @property
    def path(self) -> str: ...

    @property
    def schema(self) -> int: ...

    def head(self) -> int: ...

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> Iterable[Any]: ...


def read_leaves(reader: Source, start: int, end: int) -> list[bytes]:
    """The leaf data of leaves ``[start, end)``: the chain hashes of positions start+1..end.

    Raises:
        InvalidArgument: the log does not hold every one of those positions.
    """
    return nodes.read_chain_hashes(reader.rows, start, end, reader.path)


class LogTree:
    """The tree over ``size`` leaves, held in memory; ``subtree`` is the proofs' oracle."""

    def __init__(self, leaf_data: Sequence[bytes]) -> None:
        level = [rfc9162.leaf_hash(data) for data in leaf_data]
        self.size = len(level)
        self._levels = [level]
        node_hash = rfc9162.node_hash
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
            return self._perfect(width.bit_length() - 1, start // width)
        found = self._heads.get((start, end))
        if found is None:
            k = rfc9162.split(width)
            found = rfc9162.node_hash(self.subtree(start, start + k), self.subtree(start + k, end))
            self._heads[(start, end)] = found
        return found

    def _perfect(self, level: int, idx: int) -> bytes:
        """The head of the aligned subtree over leaves ``[idx << level, (idx + 1) << level)``."""
        return self._levels[level][idx]

    def root(self, size: int | None = None) -> bytes:
        size = self.size if size is None else size
        self._check(size)
        return self.subtree(0, size) if size else rfc9162.EMPTY_ROOT

    def inclusion(self, index: int, size: int) -> list[bytes]:
        self._check(size)
        return rfc9162.inclusion_proof(index, size, self.subtree)

    def consistency(self, old_size: int, new_size: int) -> list[bytes]:
        self._check(new_size)
        return rfc9162.consistency_proof(old_size, new_size, self.subtree)

    def _check(self, size: int) -> None:
        if not 0 <= size <= self.size:
            raise InvalidArgument(f"size {size}: the log holds {self.size} events")


class StoredTree(LogTree):
    """The tree over the first ``size`` events of a log, from its stored nodes where they are
    and its chain hashes where they are not. It reads the log as each proof needs it, so it
    answers for the log as it is then; a subclass of ``LogTree`` so that code typed for the
    in-memory tree takes it unchanged."""

    def __init__(self, reader: Source, size: int) -> None:  # (no call to LogTree's: no leaves)
        self.size = size
        self._rows = reader.rows
        self._where = reader.path
        # Leaves [0, covered) lie under stored blocks; a log older than the table has none.
        has_table = reader.schema >= nodes.SCHEMA
        self._covered = nodes.stored_blocks(reader.rows) * BLOCK if has_table else 0
        self._nodes: dict[tuple[int, int], bytes] = {}
        self._blocks: dict[int, list[list[bytes]]] = {}
        self._heads = {}

    def leaf_hash(self, index: int) -> bytes:
        """The leaf hash of leaf ``index``.

        Raises:
            InvalidArgument: ``index`` is not a leaf of this tree.
        """
        if not 0 <= index < self.size:
            raise InvalidArgument(f"leaf {index} is not in a tree of {self.size} leaves")
        return self._block(index >> LOWEST_LEVEL)[0][index & (BLOCK - 1)]

    def _perfect(self, level: int, idx: int) -> bytes:
        if level < LOWEST_LEVEL:  # inside one block: hash the block's leaves once
            shift = LOWEST_LEVEL - level
            return self._block(idx >> shift)[level][idx & ((1 << shift) - 1)]
        found = self._nodes.get((level, idx))
        if found is None:
            found = self._node(level, idx)
            self._nodes[(level, idx)] = found
        return found

    def _node(self, level: int, idx: int) -> bytes:
        start, end = idx << level, (idx + 1) << level
        if end <= self._covered:
            found = nodes.stored_node(self._rows, level, idx)
            if found is not None:
                return found
        if start >= self._covered or level == LOWEST_LEVEL:  # nothing stored to build on
            return nodes.perfect_head(self._rows, level, idx, self._where)
        # Straddling the covered edge (or a stored row missing): build from the two halves.
        return rfc9162.node_hash(
            self._perfect(level - 1, 2 * idx), self._perfect(level - 1, 2 * idx + 1)
        )

    def _block(self, block: int) -> list[list[bytes]]:
        """Every complete level of the leaves of one block (cut at the tree's size)."""
        found = self._blocks.get(block)
        if found is None:
            start = block * BLOCK
            data = nodes.read_chain_hashes(
                self._rows, start, min(start + BLOCK, self.size), self._where
            )
            level = rfc9162.leaf_hashes(data)
            found = [level]
            while len(level) > 1:
                level = rfc9162.level_up(level[: len(level) & ~1])
                found.append(level)
            self._blocks[block] = found
        return found


def open_tree(reader: Source, size: int | None = None) -> LogTree:
    """The tree over the first ``size`` events of the log (all of them by default), answered
    from the stored nodes and the chain hashes (``StoredTree``).

    Raises:
        InvalidArgument: ``size`` is negative or beyond the log's head.
    """
    head = reader.head()
    size = head if size is None else size
    if not 0 <= size <= head:
        raise InvalidArgument(f"size {size}: the log holds {head} events")
    return StoredTree(reader, size)
