"""``verify --since`` beside a full verify: a log of ``n`` events that a checkpoint commits to,
then ``new`` events after it. ``ratio.verify_since_vs_full`` is the seconds of
``verify_since`` over those of ``verify`` (goal: at most 0.1 at 10^6 + 10^4), with both
timings, the part of ``verify_since`` spent proving the log extends the checkpoint and the
part spent on the tail itself. The checkpointed log carries the tree nodes a server's lease
holder stores at each renewal (``extend_tree``); the events after the checkpoint do not, as if
the holder had not renewed since, so their part of the tree is hashed from the chain hashes.
Every figure includes opening the inputs, which are read in place."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.ready import build
from engine.audit import reading, verify
from engine.audit.note import TreeHead
from engine.audit.since import verify_since
from engine.domain import MACHINES
from engine.domain.job import JobAccepted, JobFinished, JobStarted
from engine.log import Transaction, open_log
from engine.merkle.nodes import extend_tree
from engine.merkle.tree import open_tree
from projections import default_projections


def append_jobs(db: Path, n: int) -> None:
    """At least ``n`` more events: jobs accepted, started and finished after the checkpoint."""
    log = open_log(db, MACHINES, default_projections(), sync="normal")

    def work(tx: Transaction) -> None:
        for i in range(-(-n // 3)):
            tx.append(
                f"job:later{i}",
                0,
                [JobAccepted(session="s"), JobStarted(run_id=f"t{i}"), JobFinished(outcome="ok")],
            )

    log.write(work)
    log.close()


def bench_audit_since(n: int, new: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="foldline-since-bench-") as folder:
        workspace = Path(folder)
        db = workspace / ".foldline" / "foldline.db"
        build(workspace, n)
        log = open_log(db, MACHINES, default_projections(), sync="normal")
        extend_tree(log)  # what the server's holder has done by the time it signs a checkpoint
        log.close()
        with reading(db) as reader:
            tree = open_tree(reader)
            checkpoint = TreeHead("bench", tree.size, tree.root())
        append_jobs(db, new)
        started = time.perf_counter()
        report = verify(db, MACHINES, default_projections())
        full_s = time.perf_counter() - started
        assert report.ok, report.violations[:3]
        started = time.perf_counter()
        since = verify_since(db, checkpoint, MACHINES, default_projections())
        since_s = time.perf_counter() - started
        assert since.ok and since.consistent, since.violations[:3]
    return {
        "verify_since.events": float(since.events),
        "verify_since.new_events": float(since.events - since.size),
        "verify_full.seconds": full_s,
        "verify_since.seconds": since_s,
        # Checks 1 and 2 of engine.audit.since (positions, heads and proofs, read from the
        # stored tree nodes), and checks 3 to 5 (the tail).
        "verify_since.consistency_seconds": since.seconds["tree"],
        "verify_since.tail_seconds": since.seconds["tail"],
        "ratio.verify_since_vs_full": since_s / full_s,
    }
