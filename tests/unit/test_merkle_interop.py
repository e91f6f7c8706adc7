"""Our tree heads and proofs, checked by an RFC 9162 implementation not written here.

pymerkle 7.0.0 (PyPI, in the ``test`` extras) builds its own tree over the same leaf data, the
chain hashes stored in a real log, with RFC 9162's 0x00/0x01 prefixes. It checks:
- every tree head (its ``get_root``) equals ours;
- our inclusion proofs, verified by its ``verify_inclusion`` against our head (its proofs are
  the leaf hash followed by the RFC 9162 path, and a rule of sides it derives from index and
  size, which we take from its own proof of the same leaf);
- for consistency, the two heads our proof joins are its heads. Its consistency paths follow
  another decomposition than RFC 9162's (it splits at ``old < k`` where RFC 9162 splits at
  ``old <= k``), so it cannot check our consistency path node by node; our verifier checks it
  against the heads pymerkle computed, and tests/unit/test_merkle_vectors.py checks consistency
  proofs node by node against transparency-dev's published vectors, and
  tests/unit/test_note_interop.py has tlog-scales and metamorphic-log check them.
"""

from __future__ import annotations

import random

import apsw
import pymerkle
import pytest

from engine import merkle
from engine.merkle.tree import LogTree
from tests.cli.test_audit import make_log


@pytest.fixture(scope="module")
def leaves(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    path = tmp_path_factory.mktemp("interop") / "log.db"
    make_log(path, sessions=60)
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [bytes(h) for (h,) in conn.execute("SELECT hash FROM events ORDER BY position")]
    finally:
        conn.close()


@pytest.fixture(scope="module")
def theirs(leaves: list[bytes]) -> object:
    tree = pymerkle.InmemoryTree(algorithm="sha256")
    for data in leaves:
        tree.append_entry(data)
    return tree


def test_interop_heads_equal_pymerkle_states(leaves: list[bytes], theirs: object) -> None:
    ours = LogTree(leaves)
    for size in range(1, ours.size + 1):
        assert theirs.get_root(size) == ours.root(size), size  # type: ignore[attr-defined]
        if size < 70:
            assert theirs.get_leaf(size) == ours.leaf_hash(size - 1)  # type: ignore[attr-defined]


def test_interop_pymerkle_verifies_our_inclusion_proofs(
    leaves: list[bytes], theirs: object
) -> None:
    ours = LogTree(leaves)
    rng = random.Random(2026)
    pairs = [(i, s) for s in range(1, 40) for i in range(s)]
    pairs += [(rng.randrange(s), s) for s in (rng.randrange(40, ours.size + 1) for _ in range(200))]
    for index, size in pairs:
        leaf, head = ours.leaf_hash(index), ours.root(size)
        reference = theirs.prove_inclusion(index + 1, size)  # type: ignore[attr-defined]
        proof = pymerkle.InclusionProof(
            "sha256", True, size, index + 1, reference.rule, [leaf, *ours.inclusion(index, size)]
        )
        pymerkle.verify_inclusion(leaf, head, proof, index=index + 1, size=size)
        bent = pymerkle.InclusionProof(
            "sha256", True, size, index + 1, reference.rule, [leaf, *proof.path[1:-1], leaf]
        )
        if size > 1:
            with pytest.raises(pymerkle.InvalidProof):
                pymerkle.verify_inclusion(leaf, head, bent)


def test_interop_our_consistency_proofs_join_pymerkle_heads(
    leaves: list[bytes], theirs: object
) -> None:
    ours = LogTree(leaves)
    rng = random.Random(31)
    pairs = [(o, n) for n in range(1, 30) for o in range(1, n + 1)]
    pairs += [
        (rng.randrange(1, n + 1), n) for n in (rng.randrange(30, ours.size + 1) for _ in range(200))
    ]
    for old, new in pairs:
        first = theirs.get_root(old)  # type: ignore[attr-defined]
        second = theirs.get_root(new)  # type: ignore[attr-defined]
        proof = ours.consistency(old, new)
        assert merkle.verify_consistency(old, new, proof, first, second), (old, new)
        if old < new:
            wrong = theirs.get_root(new - 1)  # type: ignore[attr-defined]
            assert not merkle.verify_consistency(old, new, proof, first, wrong)
