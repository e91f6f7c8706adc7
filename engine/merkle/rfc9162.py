"""An RFC 9162 Merkle tree: its hashes, its proofs, and their verification (pure, hashlib only).

Leaves are hashed as ``SHA-256(0x00 || data)`` and interior nodes as ``SHA-256(0x01 || left ||
right)``, here and nowhere else: ``leaf_hash`` and ``node_hash`` one at a time, ``leaf_hashes``
and ``level_up`` a whole level at once (the stored nodes hash millions of leaves). The head of
``n`` leaves is RFC 9162's MTH, split at ``k``, the largest power of two below ``n`` (an empty
tree's head is ``SHA-256()``). foldline's leaf data is the chain hash stored at each position
(``engine.merkle.tree``), so leaf ``i`` is the event at position ``i + 1``.

Proofs are generated against an oracle ``subtree(start, end)``: the head of the leaves
``[start, end)``, a perfect or imperfect subtree as RFC 9162 defines it. Only such ranges are
ever asked for, so a store of interior nodes can answer them later without changing this module.
Verification follows RFC 9162 §2.1.3.2 and §2.1.4.2 step by step and answers False, never
raises, on anything malformed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

Subtree = Callable[[int, int], bytes]


def leaf_hash(data: bytes) -> bytes:
    """The hash of one leaf: ``SHA-256(0x00 || data)``."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an interior node: ``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


# The same two hashes over a whole level, inline: these loops run over millions of leaves, where
# a function call per hash is a large share of the time. The tests hold every stored node equal
# to the in-memory tree's, which hashes one at a time.
_sha256 = hashlib.sha256


def leaf_hashes(leaf_data: Iterable[bytes]) -> list[bytes]:
    """``leaf_hash`` of each leaf's data, in order."""
    return [_sha256(b"\x00" + data).digest() for data in leaf_data]


def level_up(hashes: Sequence[bytes]) -> list[bytes]:
    """The level above an even-length run of aligned nodes: ``node_hash`` of each pair."""
    return [_sha256(b"\x01" + hashes[i] + hashes[i + 1]).digest() for i in range(0, len(hashes), 2)]


def split(n: int) -> int:
    """The largest power of two strictly below ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """The tree head (MTH) of leaves already hashed with ``leaf_hash``."""
    if not leaf_hashes:
        return EMPTY_ROOT
    return _head(leaf_hashes, 0, len(leaf_hashes))


def _head(hashes: Sequence[bytes], start: int, end: int) -> bytes:
    if end - start == 1:
        return hashes[start]
    k = split(end - start)
    return node_hash(_head(hashes, start, start + k), _head(hashes, start + k, end))


def inclusion_proof(index: int, size: int, subtree: Subtree) -> list[bytes]:
    """RFC 9162 §2.1.3.1 PATH(index, D[0:size]), from the leaf's level up.

    Raises:
        ValueError: ``index`` is not a leaf of a tree of ``size`` leaves.
    """
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size} leaves")
    path: list[bytes] = []
    start, end = 0, size
    while end - start > 1:
        k = split(end - start)
        if index < start + k:
            path.append(subtree(start + k, end))
            end = start + k
        else:
            path.append(subtree(start, start + k))
            start += k
    path.reverse()
    return path


def consistency_proof(old_size: int, new_size: int, subtree: Subtree) -> list[bytes]:
    """RFC 9162 §2.1.4.1 PROOF(old_size, D[0:new_size]); empty when the sizes are equal.

    Raises:
        ValueError: not ``0 < old_size <= new_size``.
    """
    if not 0 < old_size <= new_size:
        raise ValueError(f"no consistency proof from size {old_size} to size {new_size}")
    path: list[bytes] = []
    start, end, m, whole = 0, new_size, old_size, True
    while m != end - start:
        k = split(end - start)
        if m <= k:
            path.append(subtree(start + k, end))
            end = start + k
        else:
            path.append(subtree(start, start + k))
            start += k
            m -= k
            whole = False
    if not whole:
        path.append(subtree(start, end))
    path.reverse()
    return path


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def _sizes(*values: object) -> bool:
    return all(type(value) is int for value in values)


def _hashes(proof: object) -> bool:
    return isinstance(proof, (list, tuple)) and all(map(_is_hash, proof))


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root_hash: bytes
) -> bool:
    """Does ``proof`` put the leaf hash ``leaf`` at ``index`` of the tree of ``size`` leaves
    whose head is ``root_hash``? RFC 9162 §2.1.3.2."""
    if not (_sizes(index, size) and _hashes(proof) and _is_hash(leaf) and _is_hash(root_hash)):
        return False
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root_hash


def verify_consistency(
    old_size: int, new_size: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes
) -> bool:
    """Is the tree of ``new_size`` leaves with head ``new_root`` an extension of the tree of
    ``old_size`` leaves with head ``old_root``? RFC 9162 §2.1.4.2.

    Equal sizes are consistent with an empty proof and equal heads (the RFC's algorithm starts
    from a non-empty proof); an old size of 0 is refused, as RFC 9162 defines no proof for it.
    """
    if not (_sizes(old_size, new_size) and _hashes(proof)):
        return False
    if not (_is_hash(old_root) and _is_hash(new_root)) or not 0 < old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0
