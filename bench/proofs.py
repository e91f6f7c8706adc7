"""Proofs and checkpoints on a large log, from the stored tree nodes (ADR 0040, issue 31):

- ``tree_nodes.full_build_s``: the one-off extension of an empty table over the whole log (an
  older log's first renewal after the upgrade); ``tree_nodes.extend_ms_per_10k``: the
  extension a renewal runs after 10^4 new events (median of rounds);
- ``proof.inclusion_ms`` and ``proof.consistency_ms``: one proof answered as ``GET
  /v1/proofs/...`` answers it (a fresh read-only reader and ``open_tree`` per proof, the JSON
  shape of ``engine.merkle.proofs``), at a random position or old size, against the head
  (median of many);
- ``checkpoint.sign_ms``: what the holder does at a renewal when a checkpoint is due after
  10^3 new events: extend the nodes, then ``Checkpointer.sign`` (the head, a consistency
  proof from the last signed checkpoint, checked, and the Ed25519 note);
- ``tree.memory_root_s``: the head of the same log hashed whole in memory, as before the
  nodes were stored (the baseline: what each signing used to cost), and
  ``ratio.sign_vs_memory_root`` beside it.

The log is built with the engine's batch path (5,000 events per transaction, synchronous
NORMAL): building is not what is measured.
"""

from __future__ import annotations

import base64
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from adapters.services.checkpoints import Checkpointer, write_note
from bench.common import build_log, item_event
from engine import merkle
from engine.audit.note import generate_signer
from engine.audit.source import reading
from engine.clock import FixedClock
from engine.log import Log
from engine.merkle import proofs
from engine.merkle.nodes import extend_tree
from engine.merkle.tree import LogTree, read_leaves

ROUNDS = 3  # extensions of 10^4 events, and signings after 10^3
PROBES = 200  # proofs of each kind


def _append(log: Log, first: int, count: int) -> None:
    """``count`` new events on fresh streams, in transactions of 5,000, as ``build_log``."""
    for start in range(first, first + count, 5000):

        def work(tx: object, start: int = start) -> None:
            for i in range(start, min(start + 5000, first + count)):
                tx.append(f"item:p{i}", 0, [item_event(i, 0)])  # type: ignore[attr-defined]

        log.write(work)


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def bench_proofs(n: int) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="foldline-bench-proofs-"))
    path = folder / "bench.db"
    built = n - ROUNDS * 10_000 - ROUNDS * 1000
    try:
        return _bench(path, folder, build_log(path, built))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _bench(path: Path, folder: Path, log: Log) -> dict[str, float]:
    try:
        started = time.perf_counter()
        extend_tree(log)
        full_build = time.perf_counter() - started
        extend: list[float] = []
        for r in range(ROUNDS):
            _append(log, r * 10_000, 10_000)
            started = time.perf_counter()
            extend_tree(log)
            extend.append(_ms(started))
        signing = _signing(log, path, folder)
        head = log.head()
    finally:
        log.close()
    figures, root = _proofs(path, head)
    with reading(path) as reader:
        started = time.perf_counter()
        memory_root = LogTree(read_leaves(reader, 0, head)).root()
        memory_root_s = time.perf_counter() - started
    assert root == memory_root, "the stored nodes' head differs from the whole tree's"
    sign_ms = statistics.median(signing)
    return {
        "proofs.events": float(head),
        "tree_nodes.full_build_s": full_build,
        "tree_nodes.extend_ms_per_10k": statistics.median(extend),
        **figures,
        "checkpoint.sign_ms": sign_ms,
        "tree.memory_root_s": memory_root_s,
        "ratio.sign_vs_memory_root": sign_ms / 1000 / memory_root_s,
    }


def _signing(log: Log, path: Path, folder: Path) -> list[float]:
    """Milliseconds per due checkpoint after 10^3 new events: extend, then sign."""
    clock = FixedClock()
    checkpointer = Checkpointer(generate_signer("bench.example/log"), 1, 0.0, folder / "cp")
    with reading(path) as reader:
        first = checkpointer.sign(reader, clock.now())
    assert first is not None
    write_note(checkpointer.path, first[1])
    timings = []
    for r in range(ROUNDS):
        _append(log, ROUNDS * 10_000 + r * 1000, 1000)
        clock.advance(1)
        started = time.perf_counter()
        extend_tree(log)
        with reading(path) as reader:
            signed = checkpointer.sign(reader, clock.now())
        timings.append(_ms(started))
        assert signed is not None, "a due checkpoint was not signed"
        write_note(checkpointer.path, signed[1])
    return timings


def _proofs(path: Path, head: int) -> tuple[dict[str, float], bytes]:
    """Median milliseconds per proof, each over a fresh reader, and the head they prove
    against; each proof is checked outside the timing (a fast wrong proof is no figure)."""
    chosen = random.Random(31)
    inclusion, consistency = [], []
    root = b""
    for _ in range(PROBES):
        position = chosen.randint(1, head)
        started = time.perf_counter()
        with reading(path) as reader:
            shape = proofs.inclusion(reader, position, None)
        inclusion.append(_ms(started))
        root = _bytes(shape["root"])
        assert merkle.verify_inclusion(
            _bytes(shape["leaf_hash"]),
            position - 1,
            head,
            [_bytes(p) for p in shape["proof"]],
            root,
        )
        old = chosen.randint(1, head - 1)
        started = time.perf_counter()
        with reading(path) as reader:
            shape = proofs.consistency(reader, old, None)
        consistency.append(_ms(started))
        assert merkle.verify_consistency(
            old,
            head,
            [_bytes(p) for p in shape["proof"]],
            _bytes(shape["old_root"]),
            _bytes(shape["new_root"]),
        )
    figures = {
        "proof.inclusion_ms": statistics.median(inclusion),
        "proof.consistency_ms": statistics.median(consistency),
    }
    return figures, root


def _bytes(text: str) -> bytes:
    return base64.b64decode(text)
