"""The stored interior nodes of the log's Merkle tree (ADR 0040): derived data, kept lazily.

The ``tree_nodes`` table holds, for every level ``>= LOWEST_LEVEL``, the head of each
*complete* aligned subtree: node ``(level, idx)`` covers leaves ``[idx << level,
(idx + 1) << level)`` (leaf ``i`` is the event at position ``i + 1``, its data the stored chain
hash, ``engine.merkle.tree``). With them a tree head or a proof reads a few rows and hashes at
most a block of ``BLOCK`` leaves per edge, instead of rehashing the whole history.

The rows are a pure function of the chain hashes, so they are written with insert-or-ignore
and need no fencing: two writers can only write the same bytes. They are written after the
fact, never by the append path (whose cost issue 31 bounds): ``extend_tree`` reads the chain
hashes that came since the last complete block, hashes them outside any transaction, and
inserts the new nodes in one short write. The server calls it at each renewal of its tenure;
a log nobody extends only makes its readers hash more (``engine.merkle.tree`` falls back to
the chain hashes for whatever is not stored), and ``foldline verify`` checks every row
against the chain (``check_nodes``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from engine.chain import Violation
from engine.errors import InvalidArgument
from engine.merkle.rfc9162 import leaf_hashes, level_up, node_hash

LOWEST_LEVEL = 8  # L0: nodes over blocks of 256 leaves and above; below, hash on demand
BLOCK = 1 << LOWEST_LEVEL
SCHEMA = 2  # the migration that made the table: a log at an older schema has no nodes
CHUNK = 256  # blocks read and hashed at a time (65,536 leaves): bounded memory at any size

Rows = Callable[[str, tuple[Any, ...]], Iterable[Any]]
"""``rows(sql, params)``: a read of the log (SQLite's dialect, ``?`` placeholders)."""
Node = tuple[int, int, bytes]
"""``(level, idx, hash)``: one row of ``tree_nodes``."""
T = TypeVar("T")


class WritableLog(Protocol):
    """What ``extend_tree`` needs of a log (``engine.log.Log`` is one): reads on this thread's
    connection, its head, and a write transaction."""

    @property
    def path(self) -> str: ...

    def connection(self) -> Any: ...

    def head(self) -> int: ...

    def write(self, work: Callable[[Any], T]) -> T: ...


def read_chain_hashes(rows: Rows, start: int, end: int, where: str) -> list[bytes]:
    """The leaf data of leaves ``[start, end)``: the chain hashes of positions start+1..end,
    in one indexed range read.

    Raises:
        InvalidArgument: the log does not hold every one of those positions.
    """
    found = rows(
        "SELECT position, hash FROM events WHERE position > ? AND position <= ? ORDER BY position",
        (start, end),
    )
    hashes: list[bytes] = []
    for expected, (position, digest) in enumerate(found, start + 1):
        if position != expected:
            raise InvalidArgument(f"{where}: position {expected} is missing from the log")
        hashes.append(bytes(digest))
    if len(hashes) != end - start:
        raise InvalidArgument(f"{where}: the log holds fewer than {end} events")
    return hashes


def perfect_heads(leaf_data: Sequence[bytes], levels: int) -> list[bytes]:
    """The heads of consecutive aligned subtrees of ``1 << levels`` leaves each, from their leaf
    data (whose length is a multiple of that width)."""
    level = leaf_hashes(leaf_data)
    for _ in range(levels):
        level = level_up(level)
    return level


def stored_blocks(rows: Rows) -> int:
    """How many blocks the table covers from leaf 0: one past the highest stored block (the
    table is extended from its end, so it holds every block below that, unless edited)."""
    found = list(rows("SELECT max(idx) FROM tree_nodes WHERE level = ?", (LOWEST_LEVEL,)))
    highest = found[0][0] if found else None
    return 0 if highest is None else int(highest) + 1


def _digest(value: Any) -> bytes | None:
    """A stored hash as bytes when it is one (32 bytes of a blob), else None. SQLite keeps
    whatever type is written, so an edited row may hold text or a short blob."""
    if isinstance(value, bytes | bytearray | memoryview) and len(value) == 32:
        return bytes(value)
    return None


def stored_node(rows: Rows, level: int, idx: int) -> bytes | None:
    """The stored head of node ``(level, idx)``, None when it is not (yet) stored, or not a
    hash at all (the reader then computes it; ``verify`` reports the row)."""
    for (digest,) in rows("SELECT hash FROM tree_nodes WHERE level = ? AND idx = ?", (level, idx)):
        return _digest(digest)
    return None


def new_nodes(
    leaf_data: Sequence[bytes], first_block: int, node: Callable[[int, int], bytes]
) -> list[Node]:
    """The nodes that become complete when the blocks from ``first_block`` on are added, their
    leaf data ``leaf_data`` (a whole number of blocks). ``node(level, idx)`` answers for a left
    child that was complete before (one per level at most).
    """
    blocks = len(leaf_data) // BLOCK
    heads = perfect_heads(leaf_data, LOWEST_LEVEL)
    nodes: list[Node] = [(LOWEST_LEVEL, first_block + i, h) for i, h in enumerate(heads)]
    below = dict(enumerate(heads, first_block))
    end_block = first_block + blocks
    shift = 1
    while end_block >> shift > first_block >> shift:
        level = LOWEST_LEVEL + shift
        here: dict[int, bytes] = {}
        for idx in range(first_block >> shift, end_block >> shift):
            left = below.get(2 * idx)
            if left is None:
                left = node(level - 1, 2 * idx)
            here[idx] = node_hash(left, below[2 * idx + 1])
            nodes.append((level, idx, here[idx]))
        below = here
        shift += 1
    return nodes


def perfect_head(rows: Rows, level: int, idx: int, where: str) -> bytes:
    """The head of node ``(level, idx)`` computed from the chain hashes alone.

    Raises:
        InvalidArgument: the log does not hold all of its leaves.
    """
    start = idx << level
    return perfect_heads(read_chain_hashes(rows, start, start + (1 << level), where), level)[0]


def nodes_to_add(rows: Rows, head: int, where: str) -> list[Node]:
    """The nodes a log of ``head`` events lacks after its stored ones (empty: none), hashed
    ``CHUNK`` blocks at a time so that a first build over a long log holds little in memory.

    Raises:
        InvalidArgument: a position below the head is missing from the log.
    """
    first, end = stored_blocks(rows), head // BLOCK
    made: dict[tuple[int, int], bytes] = {}

    def node(level: int, idx: int) -> bytes:
        found = made.get((level, idx)) or stored_node(rows, level, idx)
        return found if found is not None else perfect_head(rows, level, idx, where)

    nodes: list[Node] = []
    for start in range(first, end, CHUNK):
        stop = min(start + CHUNK, end)
        leaf_data = read_chain_hashes(rows, start * BLOCK, stop * BLOCK, where)
        added = new_nodes(leaf_data, start, node)
        made.update(((level, idx), digest) for level, idx, digest in added)
        nodes += added
    return nodes


INSERT_NODES = "INSERT OR IGNORE INTO tree_nodes (level, idx, hash) VALUES (?, ?, ?)"


def extend_tree(log: WritableLog) -> int:
    """Store the nodes that the log's new complete blocks make complete; returns how many.

    The hashing runs on the read connection outside any transaction; only the insert joins a
    write (``Log.write``), and it is idempotent, so a concurrent or repeated call is harmless.

    Raises:
        InvalidArgument: a position below the head is missing from the log.
        StorageError: the log could not be read or written (read-only, I/O).
    """

    def rows(sql: str, params: tuple[Any, ...]) -> Iterable[Any]:
        found: Iterable[Any] = log.connection().cursor().execute(sql, params)
        return found

    nodes = nodes_to_add(rows, log.head(), log.path)
    if nodes:
        log.write(lambda tx: tx.cursor.executemany(INSERT_NODES, nodes))
    return len(nodes)


def check_nodes(rows: Rows, where: str) -> list[Violation]:
    """Every stored node against the chain hashes: a node that differs from the head of its
    leaves, or that covers leaves the log does not hold, is a violation at the first position
    it covers. Missing nodes are not: the table is filled lazily, and readers fall back. The
    head is read after the nodes, so a live log's new nodes are never beyond it.

    Raises:
        InvalidArgument: a position below the head is missing from the log (the chain check
            reports that itself).
    """
    stored: dict[tuple[int, int], bytes] = {}
    violations = []
    for level, idx, value in rows("SELECT level, idx, hash FROM tree_nodes", ()):
        digest = _digest(value)
        # Types checked, not coerced: SQLite keeps a written 1.5 or '1' as it is, and coercing
        # it would let such a row stand in for (and hide) the node whose key it rounds to.
        key = type(level) is int and type(idx) is int and level >= 0 and idx >= 0
        if key and level >= LOWEST_LEVEL and digest is not None:
            stored[(level, idx)] = digest
            continue
        violations.append(
            Violation(
                (idx << level) + 1 if key and level < 64 else 1,
                "tree_node_unknown",
                f"stored tree node row (level {level!r}, index {idx!r}, hash of"
                f" {type(value).__name__}) is not a node: integers from level {LOWEST_LEVEL}"
                " and index 0, and a 32-byte hash",
            )
        )
    if not stored:
        return violations
    head = int(next(iter(rows("SELECT coalesce(max(position), 0) FROM events", ())))[0])
    reach = [(idx + 1) << (level - LOWEST_LEVEL) for level, idx in stored]
    blocks = min(head // BLOCK, max(reach, default=0))
    heads: list[bytes] = []  # of every complete block, then of each level above in turn
    for first in range(0, blocks, CHUNK):
        last = min(first + CHUNK, blocks)
        data = read_chain_hashes(rows, first * BLOCK, last * BLOCK, where)
        heads += perfect_heads(data, LOWEST_LEVEL)
    computed: dict[tuple[int, int], bytes] = {}
    level = LOWEST_LEVEL
    while heads:
        computed.update(((level, idx), h) for idx, h in enumerate(heads))
        heads, level = level_up(heads[: len(heads) & ~1]), level + 1
    for (level, idx), digest in sorted(stored.items()):
        first_position = (idx << level) + 1
        if (level, idx) not in computed:
            violations.append(
                Violation(
                    first_position,
                    "tree_node_unknown",
                    f"stored tree node (level {level}, index {idx}) over positions"
                    f" {first_position}..{(idx + 1) << level} is not a complete node of the"
                    f" log's {head} events",
                )
            )
        elif computed[(level, idx)] != digest:
            violations.append(
                Violation(
                    first_position,
                    "tree_node_mismatch",
                    f"stored tree node (level {level}, index {idx}) over positions"
                    f" {first_position}..{(idx + 1) << level} differs from the head of their"
                    " chain hashes",
                )
            )
    return violations
