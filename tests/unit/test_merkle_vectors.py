"""Our RFC 9162 code against published vectors it did not make: the reference test data of
transparency-dev/merkle (Go, Apache-2.0; its testonly/constants.go and the happy-path probes
of testdata/inclusion and testdata/consistency), restated here as hex.

The eight leaves are its leaf inputs; it publishes the tree head of every prefix, and proofs
that its own verifier accepts. Ours must generate exactly those proofs and accept them, and a
changed one must fail. This checks consistency proofs node by node, which pymerkle cannot
(tests/unit/test_merkle_interop.py says why).
"""

from __future__ import annotations

import pytest

from engine import merkle
from engine.merkle.tree import LogTree

LEAVES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243")] + [
    bytes.fromhex("5051525354555657"),
    bytes.fromhex("606162636465666768696a6b6c6d6e6f"),
]
HEADS = {  # size -> tree head
    0: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    2: "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    3: "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    4: "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    5: "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    6: "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    7: "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    8: "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
}
# Node hashes the proofs are made of, by (level, index).
N = {
    (0, 0): "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    (0, 1): "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
    (0, 2): "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
    (0, 4): "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    (0, 5): "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
    (0, 6): "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
    (1, 0): "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    (1, 1): "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
    (1, 2): "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
    (1, 3): "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    (2, 0): "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    (2, 1): "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
}
INCLUSION = [  # (leaf index, size, path)
    (0, 1, []),
    (0, 8, [(0, 1), (1, 1), (2, 1)]),
    (5, 8, [(0, 4), (1, 3), (2, 0)]),
    (2, 3, [(1, 0)]),
    (1, 5, [(0, 0), (1, 1), (0, 4)]),
]
CONSISTENCY = [  # (old size, new size, proof)
    (1, 1, []),
    (1, 8, [(0, 1), (1, 1), (2, 1)]),
    (6, 8, [(1, 2), (1, 3), (2, 0)]),
    (2, 5, [(1, 1), (0, 4)]),
    (6, 7, [(1, 2), (0, 6), (2, 0)]),
]


def head(size: int) -> bytes:
    return bytes.fromhex(HEADS[size])


def nodes(path: list[tuple[int, int]]) -> list[bytes]:
    return [bytes.fromhex(N[at]) for at in path]


def test_vectors_tree_heads() -> None:
    tree = LogTree(LEAVES)
    for size in HEADS:
        assert tree.root(size) == head(size), size
        assert merkle.root([merkle.leaf_hash(d) for d in LEAVES[:size]]) == head(size)


@pytest.mark.parametrize(("index", "size", "path"), INCLUSION)
def test_vectors_inclusion(index: int, size: int, path: list[tuple[int, int]]) -> None:
    tree = LogTree(LEAVES)
    proof = nodes(path)
    assert tree.inclusion(index, size) == proof
    leaf = merkle.leaf_hash(LEAVES[index])
    assert merkle.verify_inclusion(leaf, index, size, proof, head(size))
    if len(proof) > 1:
        assert not merkle.verify_inclusion(leaf, index, size, proof[::-1], head(size))
    if size + 1 in HEADS:
        assert not merkle.verify_inclusion(leaf, index, size + 1, proof, head(size + 1))


@pytest.mark.parametrize(("old", "new", "path"), CONSISTENCY)
def test_vectors_consistency(old: int, new: int, path: list[tuple[int, int]]) -> None:
    tree = LogTree(LEAVES)
    proof = nodes(path)
    assert tree.consistency(old, new) == proof
    assert merkle.verify_consistency(old, new, proof, head(old), head(new))
    assert not merkle.verify_consistency(old, new, proof, head(new), head(old)) or old == new
    if proof:
        assert not merkle.verify_consistency(old, new, proof[:-1], head(old), head(new))
