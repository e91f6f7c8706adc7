"""The Merkle tree over a log (ADR 0040): RFC 9162's hashes and proofs, the tree over the chain
hashes, its stored interior nodes, and the proofs' JSON shapes.

- ``engine.merkle.rfc9162``: the one hashing of leaves and nodes, the tree head, the proofs
  and their verification (pure, hashlib only);
- ``engine.merkle.tree``: the tree over a log, answered from its stored nodes and chain hashes;
- ``engine.merkle.nodes``: the stored interior nodes (``tree_nodes``): extended, checked;
- ``engine.merkle.proofs``: an inclusion and a consistency proof as ``foldline prove`` prints.

A leaf package: it imports nothing of the engine but its errors and the chain's ``Violation``,
and reads or extends a log through the protocols it declares (``tree.Source``,
``nodes.WritableLog``), so the audits, the log's copy and the server all stand on it. The
RFC's functions are here by name: ``merkle.leaf_hash``, ``merkle.verify_inclusion``.
"""

from engine.merkle.rfc9162 import (
    EMPTY_ROOT,
    HASH_SIZE,
    Subtree,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    leaf_hashes,
    level_up,
    node_hash,
    root,
    split,
    verify_consistency,
    verify_inclusion,
)

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "Subtree",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "leaf_hashes",
    "level_up",
    "node_hash",
    "root",
    "split",
    "verify_consistency",
    "verify_inclusion",
]
