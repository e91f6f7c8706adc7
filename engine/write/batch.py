"""One batch of the group commit, run: one transaction for its callers, tried once or twice.

``engine.write.group_commit`` decides who leads and who is in the batch; this module opens the
writer's transaction (early, while the callers queue, when ``begin`` waits for a server), runs
each caller's work in its scope of one ``engine.write.transaction.Transaction``, commits once, and
keeps what is then true of the log for the next batch (``BatchContext.cache``). A batch that
took streams as new on trust and was proved wrong is rolled back and run once more, reading
(ADR 0026). It sees the log only through its ``BatchContext``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from engine.storage.seam import Writer, translated
from engine.write.context import BatchContext
from engine.write.group_commit import Request
from engine.write.lone import append_alone, is_quiet
from engine.write.transaction import Transaction


def run_batch(context: BatchContext, gather: Callable[[], list[Request]]) -> None:
    """Run a batch of requests in one transaction; each request gets its result or error.

    ``gather`` gives the batch. A batch of plain appends only (each may run again) takes the
    streams they say are new as new without reading them (``Transaction.read_heads``); if the
    log proves one of them wrong, or any of its works fails (its error may hold only for a new
    stream), the batch is rolled back and run once more, reading."""
    if _run_once(context, gather, trust_new=True):
        _run_once(context, gather, trust_new=False)


def _run_once(context: BatchContext, gather: Callable[[], list[Request]], trust_new: bool) -> bool:
    """``run_batch``'s one try; True when it must be made again, without ``trust_new``.

    A writer whose BEGIN waits for a server (``begins_while_gathering``: PostgreSQL's head-row
    lock is a round trip) opens the transaction first, while the batch's callers are still
    queueing; any other (SQLite's in-process BEGIN) opens it once they have, holding its lock
    no longer than the batch."""
    started = time.perf_counter()
    projections = context.projections
    cache = context.cache
    batch: list[Request] = []
    writer: Writer | None = None
    trusted = False
    try:
        writer = context.storage.writer()
        early = writer.capabilities.begins_while_gathering
        began = writer.begin() if early else False
        batch = gather()
        if not early:
            began = writer.begin()
        cached = began and cache.valid
        if cached and len(batch) == 1 and not early:
            plain = batch[0].plain
            if plain is not None and is_quiet(context):
                append_alone(context, writer, batch[0], plain, started)
                return False
        shared = len(batch) > 1
        tx = Transaction(context, writer, shared, cached)
        # With nothing written by anybody else since our last commit, and that commit leaving
        # every projection settled, ``prepare`` would read the checkpoints to do nothing.
        registered = (
            None
            if cached and cache.settled
            else projections.prepare(writer.cursor, tx.events_after)
        )
        if shared:  # (after ``prepare``, which may refold the heads' table)
            trust_new = trust_new and all(request.expected is not None for request in batch)
            tx.read_heads(batch, trust_new)
            trusted = tx.trusted
        for request in batch:
            tx.start_work()
            try:
                request.result = request.work(tx)
                tx.finish_work()
            except BaseException as ex:  # scoped to its caller, re-raised in its thread
                if tx.broken is not None:
                    raise
                if trusted:  # its answer may rest on a stream taken as new: ask a read
                    raise _Untrusted from ex
                request.error = translated(context.storage, ex)
                tx.abandon_work()
                if not shared:
                    writer.rollback()
                    return False
                if tx.savepoint:
                    writer.rollback_to_savepoint()
            if tx.savepoint:
                writer.release_savepoint()
        if registered is not None and tx.appended:
            # (Another table than the buffered rows: the order of the two does not matter.)
            projections.fence_lagging(writer.cursor, registered, tx.start_position)
        tx.commit()
    except BaseException as ex:
        cache.forget()
        if writer is not None:
            with contextlib.suppress(BaseException):  # the original failure is the news
                writer.rollback()
        if trusted and (isinstance(ex, _Untrusted) or (writer is not None and writer.collided(ex))):
            for request in batch:  # nothing of the try is kept: the works run again
                request.result, request.error = None, None
            return True
        failure = translated(context.storage, ex)
        for request in batch or gather():
            request.result, request.error = None, request.error or failure
        return False
    if tx.invalidated:
        cache.forget()
        return False
    if registered is not None:
        cache.settled = _settled(registered, projections.names, bool(tx.appended))
    tx.remember()
    if tx.appended:
        stats = context.stats
        stats.commits += 1
        stats.events += len(tx.appended)
        stats.commit_seconds += time.perf_counter() - started
        stats.batch_sizes[len(batch)] = stats.batch_sizes.get(len(batch), 0) + 1
        context.announce(tx.position)
    return False


class _Untrusted(Exception):
    """A work of a batch that took streams as new failed: its error (a transition the initial
    state refuses, say) may be true only of a new stream, so the batch runs again, reading."""


def _settled(registered: dict[str, int | None], ours: frozenset[str], fenced: bool) -> bool:
    """Whether ``prepare`` and ``fence_lagging`` left nothing for the next batch to do: each
    of ours is current (checkpoint NULL) and each other registered one has a checkpoint."""
    return all(
        checkpoint is None if name in ours else checkpoint is not None or fenced
        for name, checkpoint in registered.items()
    )
