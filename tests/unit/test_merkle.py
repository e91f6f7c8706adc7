"""The Merkle tree over a real log: its heads equal a plain RFC 9162 computation over the
stored chain hashes, and every proof verifies while any change to it fails."""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from engine import merkle
from engine.audit.source import reading
from engine.errors import InvalidArgument
from engine.merkle.tree import LogTree, open_tree, read_leaves
from tests.cli.test_audit import make_log, tamper


def reference_head(data: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1 MTH, written as the RFC states it."""
    if not data:
        return hashlib.sha256(b"").digest()
    if len(data) == 1:
        return hashlib.sha256(b"\x00" + data[0]).digest()
    k = 1
    while k * 2 < len(data):
        k *= 2
    return hashlib.sha256(b"\x01" + reference_head(data[:k]) + reference_head(data[k:])).digest()


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("merkle") / "log.db"
    make_log(path, sessions=400)
    return path


@pytest.fixture(scope="module")
def chain_hashes(log: Path) -> list[bytes]:
    """The stored chain hashes, read straight from the file."""
    conn = apsw.Connection(str(log), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [bytes(h) for (h,) in conn.execute("SELECT hash FROM events ORDER BY position")]
    finally:
        conn.close()


@pytest.fixture(scope="module")
def tree(log: Path) -> Iterator[LogTree]:
    with reading(log) as reader:  # the stored tree reads the log as proofs need it
        yield open_tree(reader)


def flipped(data: bytes, bit: int = 0) -> bytes:
    return bytes([data[0] ^ (1 << bit)]) + data[1:]


def test_tree_head_equals_the_reference_over_the_stored_chain_hashes(
    tree: LogTree, chain_hashes: list[bytes]
) -> None:
    assert tree.size == len(chain_hashes) > 2000
    large = random.Random(31).randrange(1001, tree.size)
    for size in (1, 2, 3, 7, 8, 9, 1000, large, tree.size):
        expected = reference_head(chain_hashes[:size])
        assert tree.root(size) == expected, size
        assert merkle.root([merkle.leaf_hash(h) for h in chain_hashes[:size]]) == expected
    assert tree.root(0) == merkle.root([]) == hashlib.sha256(b"").digest()


def test_tree_leaves_are_the_chain_hashes_of_positions(
    log: Path, chain_hashes: list[bytes]
) -> None:
    with reading(log) as reader:
        assert read_leaves(reader, 10, 13) == chain_hashes[10:13]
        with pytest.raises(InvalidArgument, match="fewer than"):
            read_leaves(reader, 0, len(chain_hashes) + 1)
        with pytest.raises(InvalidArgument):
            open_tree(reader, len(chain_hashes) + 1)


def test_tree_refuses_a_log_with_a_missing_position(tmp_path: Path) -> None:
    path = tmp_path / "gap.db"
    make_log(path)
    tamper(path, "DELETE FROM events WHERE position = 5")
    with reading(path) as reader, pytest.raises(InvalidArgument, match="position 5 is missing"):
        read_leaves(reader, 0, 10)


def _pairs(size: int, rng: random.Random) -> list[tuple[int, int]]:
    small = [(a, b) for b in range(1, 34) for a in range(b)]
    large = [(rng.randrange(b), b) for b in (rng.randrange(34, size + 1) for _ in range(300))]
    return small + large + [(0, size), (size - 1, size)]


def test_every_inclusion_proof_verifies_and_any_change_fails(tree: LogTree) -> None:
    rng = random.Random(9162)
    for index, size in _pairs(tree.size, rng):
        proof = tree.inclusion(index, size)
        leaf, head = tree.leaf_hash(index), tree.root(size)
        assert merkle.verify_inclusion(leaf, index, size, proof, head), (index, size)
        assert not merkle.verify_inclusion(flipped(leaf), index, size, proof, head)
        assert not merkle.verify_inclusion(leaf, index, size, proof, flipped(head, 7))
        assert not merkle.verify_inclusion(leaf, index, size, [*proof, leaf], head)
        for other in (size - 1, size + 1):  # a wrong size, with that size's own head
            if index < other <= tree.size:
                assert not merkle.verify_inclusion(leaf, index, other, proof, tree.root(other))
        if size > 1:
            assert not merkle.verify_inclusion(leaf, index ^ 1, size, proof, head)
            assert not merkle.verify_inclusion(leaf, index, size, proof[:-1], head)
        for at in range(len(proof)):
            bent = [*proof[:at], flipped(proof[at], at % 8), *proof[at + 1 :]]
            assert not merkle.verify_inclusion(leaf, index, size, bent, head)


def test_every_consistency_proof_verifies_and_any_change_fails(tree: LogTree) -> None:
    rng = random.Random(6962)
    for old, new in [(a + 1, b) for a, b in _pairs(tree.size, rng)]:
        proof = tree.consistency(old, new)
        first, second = tree.root(old), tree.root(new)
        assert merkle.verify_consistency(old, new, proof, first, second), (old, new)
        assert not merkle.verify_consistency(old, new, proof, flipped(first), second)
        assert not merkle.verify_consistency(old, new, proof, first, flipped(second, 3))
        if old == new:
            assert proof == []
            continue
        assert not merkle.verify_consistency(old, new, proof[:-1], first, second)
        assert not merkle.verify_consistency(old, new, [*proof, first], first, second)
        for other in (new - 1, new + 1):  # a wrong size, with that size's own head
            if old <= other <= tree.size:
                assert not merkle.verify_consistency(old, other, proof, first, tree.root(other))
        if old > 1:
            assert not merkle.verify_consistency(old - 1, new, proof, tree.root(old - 1), second)
        for at in range(len(proof)):
            bent = [*proof[:at], flipped(proof[at], at % 8), *proof[at + 1 :]]
            assert not merkle.verify_consistency(old, new, bent, first, second)


def test_proofs_refuse_the_edge_cases() -> None:
    tree = LogTree([bytes([i]) * 32 for i in range(9)])
    head, leaf = tree.root(), tree.leaf_hash(0)
    assert tree.inclusion(0, 1) == [] and merkle.verify_inclusion(leaf, 0, 1, [], tree.root(1))
    assert not merkle.verify_inclusion(leaf, 9, 9, tree.inclusion(8, 9), head)  # index >= size
    assert not merkle.verify_inclusion(leaf, 0, 0, [], head)
    assert not merkle.verify_inclusion(leaf, -1, 9, tree.inclusion(0, 9), head)
    assert not merkle.verify_inclusion(leaf[:31], 0, 9, tree.inclusion(0, 9), head)
    assert merkle.verify_consistency(9, 9, [], head, head)
    assert not merkle.verify_consistency(9, 9, [head], head, head)
    assert not merkle.verify_consistency(0, 9, [], merkle.EMPTY_ROOT, head)  # old 0: refused
    assert not merkle.verify_consistency(9, 3, tree.consistency(3, 9), head, tree.root(3))
    assert not merkle.verify_consistency(3, 9, [], tree.root(3), head)
    for bad in ((0, 1), (1, 0), (2, 1), (-1, 3)):
        with pytest.raises(ValueError):
            merkle.consistency_proof(*bad, tree.subtree)
    for index, size in ((1, 1), (-1, 3), (0, 0)):
        with pytest.raises(ValueError):
            merkle.inclusion_proof(index, size, tree.subtree)
    with pytest.raises(InvalidArgument):
        tree.inclusion(0, 10)


def test_proofs_at_a_hundred_thousand_leaves_take_well_under_a_second() -> None:
    data = [i.to_bytes(32, "big") for i in range(100_000)]
    started = time.perf_counter()
    tree = LogTree(data)
    inclusion = tree.inclusion(54_321, 100_000)
    consistency = tree.consistency(77_777, 100_000)
    elapsed = time.perf_counter() - started
    assert merkle.verify_inclusion(tree.leaf_hash(54_321), 54_321, 100_000, inclusion, tree.root())
    assert merkle.verify_consistency(77_777, 100_000, consistency, tree.root(77_777), tree.root())
    assert elapsed < 1.0, elapsed
