"""A plain append in a batch of its own, on a quiet log: the same rows, without the scopes.

``engine.write.transaction.Transaction`` serves any number of works in one batch: a scope per
work (its marks, heads, commands and savepoint), rows buffered across works and kept for
the command outcomes of later works. A batch of one plain ``Log.append`` (the lone
writer's every append) needs none of that when the log is quiet: the writer's cache is valid
(nobody else committed since this process's last commit), every projection is settled, there
is no command id, and the declarations this log records, if any, are the ones it last
recorded. Then the append is its checks, its rows and one commit, and this module runs only
that. Its result, its refusals and the rows it leaves are the transaction's, check for check
(``_append`` follows ``Transaction.append_encoded``); anything else takes the transaction's
path, whose scopes it would not use (ADR 0066).

Two ways in: ``append_now``, from ``Log.append`` itself when nobody else leads or waits, which
takes the lead from the group commit without queueing a request or running a batch; and
``append_alone``, from a batch of one plain append (``engine.write.batch``), for the caller
that found the lead taken and was handed it later.

Measured with ``python -m bench.append_profile``: the Python of a lone append, which is what
bounds ``ratio.append_normal_vs_raw`` (docs/benchmarks.md, "Issue 46").
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine import chain
from engine.declarations import STREAM as DECLARATIONS
from engine.errors import ConcurrencyError, FencedOut, InvalidArgument
from engine.events import Event, RecordedEvent
from engine.machines import Machine, StreamHead
from engine.storage.seam import NOTHING_BUFFERED, Buffered, Writer, translated
from engine.storage.streams_table import head_rows
from engine.write.transaction import HEAD_CACHE_SIZE, AppendResult

if TYPE_CHECKING:
    from engine.write.context import BatchContext
    from engine.write.group_commit import GroupCommit, Request

# What ``Log.append`` hands over for this path: stream id, expected version, the events,
# their (event_type, payload) encodings, the stream's machine and the epoch (None: the log's).
Plain = tuple[str, int, Sequence[Event], list[tuple[str, bytes]], Machine, int | None]


def is_quiet(context: BatchContext) -> bool:
    """Whether a lone plain append may skip the transaction's scopes: nothing is stale and
    nothing but the append itself is to be written (the caller has checked that the cache is
    valid for this batch)."""
    cache = context.cache
    if not cache.settled:
        return False
    wanted = context.declarations
    if wanted is None:
        return True
    # As ``declarations.record_if_changed`` decides it, from what is cached only: the
    # declarations stream's head is where this process last knew it, with these digests.
    known = context.declared
    head = cache.heads.get(DECLARATIONS)
    return known is not None and head is not None and known == (head.version, wanted.digest)


def append_now(context: BatchContext, group: GroupCommit, plain: Plain) -> AppendResult | None:
    """``Log.append``'s way in for a caller alone on a quiet log: the lead taken straight from
    the group commit, no ``Request`` queued and no batch run, then ``append_alone``'s checks,
    rows and commit, its failures handled as ``run_batch`` handles a batch of one plain
    append's. None, having changed nothing: somebody else leads or waits, the writer begins
    while gathering (PostgreSQL), or the log is not quiet; ``Log.append`` then submits the
    append as any other work.

    Raises what ``Log.append`` raises, as the batch would have handed it over.
    """
    if not group.try_lead_alone():
        return None
    storage, cache = context.storage, context.cache
    started = time.perf_counter()
    writer: Writer | None = None
    try:
        writer = storage.writer()
        if writer.capabilities.begins_while_gathering:
            return None
        if not writer.begin():
            cache.forget()  # another process committed: nothing cached holds
        if not (cache.valid and is_quiet(context)):
            writer.rollback()
            return None
        return _append(context, writer, plain, started)
    except Refused as refused:  # the cache still holds, as after a failed work
        writer.rollback()  # type: ignore[union-attr]  # refused once it began
        raise translated(storage, refused.error) from None
    except BaseException as ex:
        cache.forget()
        if writer is not None:
            with contextlib.suppress(BaseException):  # the original failure is the news
                writer.rollback()
        raise translated(storage, ex) from None
    finally:
        group.hand_over()


def append_alone(
    context: BatchContext, writer: Writer, request: Request, plain: Plain, started: float
) -> None:
    """Run ``request``'s plain append as its own batch in the transaction ``writer`` holds,
    and commit it; ``request`` gets its ``AppendResult`` or its refusal.

    A refusal (ConcurrencyError, InvalidTransition, FencedOut, InvalidArgument, or a failed
    read or fold) rolls the transaction back and keeps the cache, as a failed work of a batch
    of one does. A failed COMMIT is raised to the batch (``run_batch``), which forgets the
    cache and hands the failure to the caller.
    """
    try:
        request.result = _append(context, writer, plain, started)
    except Refused as refused:  # the work's own failure: scoped to its caller
        request.error = translated(context.storage, refused.error)
        writer.rollback()


class Refused(Exception):
    """``_append`` refused the append before its commit: ``error`` says why."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _append(context: BatchContext, writer: Writer, plain: Plain, started: float) -> AppendResult:
    """The append's checks (those of ``Transaction.append_encoded``, in its order), its rows,
    its commit, and what is then true of the log, in the transaction ``writer`` holds.
    Projections that fold an event read the database: the rows are then written first and
    folded at once; else they go with the COMMIT.

    Raises:
        Refused: the append was refused (InvalidArgument, ConcurrencyError, FencedOut,
            InvalidTransition, or a failed read or fold); nothing is committed.
        Anything else: the commit failed.
    """
    stream_id, expected_version, events, encoded, machine, epoch = plain
    cache = context.cache
    try:
        if epoch is None:
            epoch = context.epoch
        elif isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgument(f"epoch must be an int >= 0, got {epoch!r}")
        head = cache.heads.get(stream_id)
        if head is None:
            stored = writer.stream_head(stream_id)
            head = StreamHead(stream_id, *stored) if stored else StreamHead(stream_id, 0, None)
        version = head.version
        if version != expected_version:
            raise ConcurrencyError(stream_id, expected_version, version)
        position, previous, last_epoch = cache.tail
        if epoch < last_epoch:
            raise FencedOut(epoch, last_epoch)
        recorded_at = context.recorded_now()
        folding = context.folding
        rows = []
        folded: list[tuple[Any, RecordedEvent]] = []
        for event, (event_type, payload) in zip(events, encoded, strict=True):
            state = machine.next_state(head, event, event_type)
            position += 1
            version += 1
            head = StreamHead(stream_id, version, state)  # the next event's guard sees it
            row = chain.linked_row(
                previous, position, stream_id, version, event_type,
                recorded_at, epoch, None, state, payload,
            )  # fmt: skip
            previous = row[9]
            rows.append(row)
            projections = folding(event_type)
            if projections:
                recorded = RecordedEvent.from_row(row, event)
                folded += [(projection, recorded) for projection in projections]
        first = rows[0]
        buffered: Buffered = (rows, head_rows(rows), ())
        if folded:
            # The projections read the database: it sees this append first, as the
            # transaction's cursor makes it (no savepoint: the batch is this work alone).
            writer.insert_events(rows)
            writer.upsert_heads(buffered[1])
            cursor = writer.cursor
            for projection, recorded in folded:
                projection.apply(cursor, recorded)
            buffered = NOTHING_BUFFERED
    except BaseException as ex:
        raise Refused(ex) from None
    writer.commit(buffered)
    # ``Transaction.remember``: the log as this commit left it (the cache was valid).
    cache.tail = (position, previous, epoch)
    heads = cache.heads
    if len(heads) >= HEAD_CACHE_SIZE:
        heads.clear()
    heads[stream_id] = head
    stats = context.stats
    stats.commits += 1
    stats.events += len(rows)
    stats.commit_seconds += time.perf_counter() - started
    sizes = stats.batch_sizes
    sizes[1] = sizes.get(1, 0) + 1
    context.announce(position)
    return AppendResult(
        stream_id=stream_id,
        first_version=first[2],
        last_version=version,
        first_position=first[0],
        last_position=position,
        state=state or "",
    )
