"""The JSON shapes of an inclusion and a consistency proof, read from a log through a tree
``Source`` (an audit ``Reader``): what ``foldline prove`` prints and ``GET /v1/proofs/...``
answers (docs/auditing.md, "Proofs without the log"). Every hash is standard base64. A position
or size outside the log raises ``refuse``: ``InvalidArgument`` for the CLI, ``OutOfRange``
(404) for HTTP."""

from __future__ import annotations

import base64
from typing import Any

from engine.errors import InvalidArgument
from engine.merkle.tree import LogTree, Source, open_tree, read_leaves


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


Refusal = type[InvalidArgument]


def _tree(reader: Source, size: int | None, what: str, refuse: Refusal) -> LogTree:
    head = reader.head()
    if size is not None and not 1 <= size <= head:
        raise refuse(f"{what} {size}: the log holds {head} events")
    return open_tree(reader, size)


def inclusion(
    reader: Source,
    position: int,
    size: int | None,
    what: str = "size",
    refuse: Refusal = InvalidArgument,
) -> dict[str, Any]:
    """The proof that the event at ``position`` is in the tree of ``size`` (default: the head).

    Raises:
        InvalidArgument: (``refuse``) ``size`` is not 1..head, or ``position`` not 1..size.
    """
    tree = _tree(reader, size, what, refuse)
    if not 1 <= position <= tree.size:
        raise refuse(f"position {position}: not in a tree of {tree.size} events")
    index = position - 1
    chain_hash = read_leaves(reader, index, position)[0]
    return {
        "size": tree.size,
        "root": b64(tree.root()),
        "position": position,
        "leaf_index": index,
        "chain_hash": b64(chain_hash),
        "leaf_hash": b64(tree.leaf_hash(index)),
        "proof": [b64(node) for node in tree.inclusion(index, tree.size)],
    }


def consistency(
    reader: Source,
    old_size: int,
    new_size: int | None,
    what: str = "new size",
    refuse: Refusal = InvalidArgument,
) -> dict[str, Any]:
    """The proof that the tree of ``new_size`` (default: the head) extends that of ``old_size``.

    Raises:
        InvalidArgument: (``refuse``) ``new_size`` is not 1..head, or ``old_size`` not
            1..new_size.
    """
    tree = _tree(reader, new_size, what, refuse)
    if not 1 <= old_size <= tree.size:
        raise refuse(f"old size {old_size}: must be between 1 and the new size {tree.size}")
    return {
        "old_size": old_size,
        "new_size": tree.size,
        "old_root": b64(tree.root(old_size)),
        "new_root": b64(tree.root()),
        "proof": [b64(node) for node in tree.consistency(old_size, tree.size)],
    }
