"""One batch of the group commit: a write transaction shared by its callers.

Backend-neutral: the machine checks, the hash chain, command idempotency and the projection
calls are here, the SQL is behind ``engine.storage.Writer``.

The hot path writes nothing per event. Appended rows, stream heads and command rows wait in
Python buffers and are written once per batch, one statement per table (ADR 0021). Each
caller's work is a scope: if it raises, its buffered rows are dropped and the log's tail and
heads go back to where the work found them. SQL is flushed earlier only when someone needs the
database to see the batch so far: the first time a work (a domain view, a projection with a
handler for the event) runs SQL on ``Transaction.cursor``. That work then gets a savepoint,
taken after the rows of the works before it are written, so its own failure still undoes only
its own part.

What the log knows about its tail, its stream heads and its projection checkpoints is kept
between batches (``engine.write.context.WriterCache``) while no other process commits
(``Writer.begin``). A transaction sees its log only through that context (``BatchContext``);
the batch around it, one try or two, is ``engine.write.batch``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from engine import chain, declarations
from engine.errors import ConcurrencyError, FencedOut, InvalidArgument
from engine.events import Event, RecordedEvent
from engine.machines import Machine, StreamHead
from engine.storage.seam import CommandRow, EventRow, Writer
from engine.storage.streams_table import head_rows

if TYPE_CHECKING:
    from engine.write.context import BatchContext
    from engine.write.group_commit import Request

MAX_COMMAND_ID = 256
# Stream heads kept between batches. Bounded so that memory does not grow with the number of
# streams in the log: a miss costs one primary-key lookup in ``streams``.
HEAD_CACHE_SIZE = 8192


class AppendResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one append produced (or, when ``duplicate``, what the first one produced)."""

    stream_id: str
    first_version: int
    last_version: int
    first_position: int
    last_position: int
    state: str
    duplicate: bool = False


def check_arguments(
    expected_version: Any, events: Any, command_id: Any, at_head_allowed: bool = False
) -> None:
    if expected_version is None and at_head_allowed:
        pass  # append at the head (inside a transaction)
    elif isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise InvalidArgument(f"expected_version must be an int, got {expected_version!r}")
    elif expected_version < 0:
        raise InvalidArgument(f"expected_version must be >= 0, got {expected_version}")
    if not isinstance(events, (list, tuple)) or not events:
        raise InvalidArgument("events must be a non-empty list of Event")
    if command_id is not None and (
        not isinstance(command_id, str) or not 0 < len(command_id) <= MAX_COMMAND_ID
    ):
        raise InvalidArgument(f"command_id must be a string of 1..{MAX_COMMAND_ID} characters")


class _SqlCursor:
    """``Transaction.cursor``: the writer's cursor, written up to date on first use.

    Whoever runs SQL inside the transaction must see the batch so far, so the first call that
    reaches the database flushes the buffered rows (and opens the work's savepoint)."""

    def __init__(self, tx: Transaction) -> None:
        self._tx = tx

    def __getattr__(self, name: str) -> Any:
        self._tx.enter_sql()
        return getattr(self._tx.writer.cursor, name)


class Transaction:
    """The write side of one batch: appends and reads inside the open transaction."""

    def __init__(self, context: BatchContext, writer: Writer, shared: bool, cached: bool) -> None:
        self._context = context
        self.writer = writer
        self._shared = shared
        cache = context.cache
        self._cache = cache if cached else None
        if not cached:
            cache.forget()
            cache.tail = writer.tail()
        # Epochs never decrease along the log (older ones are fenced out), so the last row's
        # epoch is the newest tenure.
        self.position, self.last_hash, self.epoch = cache.tail
        self.start_position = self.position
        self.appended: list[EventRow] = []  # the batch's rows, written or not
        self.cursor: Any = _SqlCursor(self)
        self._recorded_at: str | None = None
        # The batch so far (finished works): rows not yet written, heads, commands.
        self._rows: list[EventRow] = []
        self._command_rows: list[CommandRow] = []
        self._heads: dict[str, StreamHead] = {}
        # Heads of the batch's streams as the database had them when the batch began.
        self._read: dict[str, StreamHead] = {}
        self._commands: dict[str, AppendResult] = {}
        # The current work (set by ``start_work``). Its rows follow the batch's in ``_rows``
        # from ``_work_start``; ``_in_sql``: it has flushed and writes straight through;
        # ``savepoint``: it runs in one.
        self._work_start: int
        self._work_heads: dict[str, StreamHead]
        self._open_commands: dict[str, tuple[str, int]]
        self._mark: tuple[int, bytes, int, int]
        self._in_sql: bool
        self.savepoint: bool
        self.broken: BaseException | None = None  # a flush of finished works failed
        self.trusted = False  # some heads were taken as new unread (``read_heads``)
        self.invalidated = False  # a work rewrote tables the cache describes
        self._declared_in: object = None  # the work whose declarations were checked

    # -- work scopes ---------------------------------------------------------------------

    def start_work(self) -> None:
        self._mark = self.position, self.last_hash, self.epoch, len(self.appended)
        self._work_start = len(self._rows)
        self._work_heads = {}
        self._open_commands = {}
        self._in_sql = False
        self.savepoint = False

    def finish_work(self) -> None:
        """Record the commands the finished work appended under (one row each, forever) and
        fold its heads into the batch's."""
        for command_id, (stream_id, first) in self._open_commands.items():
            self._command_rows.append((command_id, stream_id, first, self.position))
            last = self._row_at(self.position)
            self._commands[command_id] = AppendResult(
                stream_id=stream_id,
                first_version=self._row_at(first)[2],
                last_version=last[2],
                first_position=first,
                last_position=self.position,
                state=last[7],
                duplicate=True,
            )
        if self._in_sql and self._command_rows:
            self.writer.insert_commands(self._command_rows)
            self._command_rows = []
        if self._heads:
            self._heads.update(self._work_heads)
        else:
            self._heads = self._work_heads

    def abandon_work(self) -> None:
        """Forget what the failed work appended (its SQL is the caller's to roll back)."""
        self.position, self.last_hash, self.epoch, count = self._mark
        del self.appended[count:]
        del self._rows[self._work_start :]

    def invalidate(self) -> None:
        """Say that this batch rewrote the projections or heads (rebuilds, installs): the
        next batch reads them from the database again."""
        self.invalidated = True

    def read_heads(self, batch: Sequence[Request], trust_new: bool) -> None:
        """Read at once the heads of the streams the batch's works said they append to and
        nothing here knows yet, where a lookup is a round trip (a writer that
        ``reads_heads_at_once``: PostgreSQL): one query instead of one per work. SQLite's
        lookups are in-process and stay lazy.

        ``trust_new`` (the caller has checked that every work is a plain append, which may run
        again): when each of those streams is one its append says is new (expected version
        0), they are taken as new without a query, and ``trusted`` is set. A stream that is
        not new makes its first event collide with the stored one on ``UNIQUE (stream_id,
        version)``: the batch fails whole, and ``run_batch`` runs it again reading the heads
        (ADR 0026)."""
        if not self.writer.capabilities.reads_heads_at_once:
            return
        cache = self._cache
        known = cache.heads if cache is not None else {}
        unknown = [r for r in batch if r.stream_id is not None and r.stream_id not in known]
        wanted = {r.stream_id for r in unknown if r.stream_id is not None}
        if trust_new and wanted and all(r.expected == 0 for r in unknown):
            self._read = {s: StreamHead(s, 0, None) for s in wanted}
            self.trusted = True
            return
        if len(wanted) < 2:
            return  # one lookup either way: ``head_of`` makes it when the work asks
        found = self.writer.stream_heads(sorted(wanted))
        self._read = {
            s: StreamHead(s, *found[s]) if s in found else StreamHead(s, 0, None) for s in wanted
        }

    def _row_at(self, position: int) -> EventRow:
        return self.appended[position - self.start_position - 1]

    def enter_sql(self) -> None:
        """Make the database see the batch so far; from now on the work writes through."""
        if self._in_sql:
            return
        writer = self.writer
        done, mine = self._rows[: self._work_start], self._rows[self._work_start :]
        try:
            self._write(done, self._command_rows)
        except BaseException as ex:
            self.broken = ex
            raise
        self._command_rows = []
        if self._shared:
            writer.savepoint()
            self.savepoint = True
        self._rows, self._work_start = [], 0
        self._in_sql = True
        self._write(mine, ())

    def _write(self, rows: list[EventRow], commands: Sequence[CommandRow]) -> None:
        if rows:
            self.writer.insert_events(rows)
            self.writer.upsert_heads(head_rows(rows))
        if commands:
            self.writer.insert_commands(commands)

    def commit(self) -> None:
        """Hand whatever is still buffered to the writer's commit: a writer whose statements
        wait for a server sends them with the COMMIT and waits once, not once per table."""
        rows, commands = self._rows, self._command_rows
        self._rows, self._command_rows = [], []
        self.writer.commit((rows, head_rows(rows) if rows else (), commands))

    # -- reads inside the transaction ----------------------------------------------------

    def known_command(self, command_id: str) -> AppendResult | None:
        """The first outcome of a command accepted earlier (None if new or opened by this work)."""
        if command_id in self._open_commands:
            return None
        known = self._commands.get(command_id)
        if known is not None:
            return known
        row = self.writer.command_outcome(command_id)
        if row is None:
            return None
        stream_id, first, last, first_version, last_version, state = row
        return AppendResult(
            stream_id=stream_id,
            first_version=first_version,
            last_version=last_version,
            first_position=first,
            last_position=last,
            state=state,
            duplicate=True,
        )

    def head_of(self, stream_id: str) -> StreamHead:
        """The stream's version and state as of this transaction."""
        head = self._work_heads.get(stream_id) or self._heads.get(stream_id)
        if head is not None:
            return head
        cache = self._cache
        if cache is not None:
            head = cache.heads.get(stream_id)
            if head is not None:
                return head
        head = self._read.get(stream_id)
        if head is not None:
            return head
        row = self.writer.stream_head(stream_id)
        return StreamHead(stream_id, *row) if row else StreamHead(stream_id, 0, None)

    def events_after(
        self, position: int, event_types: frozenset[str] | None = None
    ) -> Iterator[RecordedEvent]:
        """Recorded events after a position as this transaction sees them (folds), only of
        ``event_types`` when given (``engine.projection.EventSource``)."""
        if self._rows or self._command_rows:
            self.enter_sql()
        if event_types is not None:  # and the stored tags that upcast into them
            event_types = self._context.codec.stored_as(event_types)
        return map(self._context.decode, self.writer.rows_after(position, event_types))

    # -- appends -------------------------------------------------------------------------

    def append(
        self,
        stream_id: str,
        expected_version: int | None,
        events: Sequence[Event],
        command_id: str | None = None,
        epoch: int | None = None,
    ) -> AppendResult:
        """Append events to one stream; see ``Log.append`` for the contract. Inside a
        transaction nobody else can move the head, so ``expected_version=None`` appends at it
        (the domain rules, which read the rows they decide on in the same transaction)."""
        context = self._context
        check_arguments(expected_version, events, command_id, at_head_allowed=True)
        machine = context.machines.for_stream(stream_id)
        encode = context.codec.encode
        encoded = [encode(event) for event in events]
        return self.append_encoded(
            stream_id, expected_version, events, encoded, machine, command_id, epoch
        )

    def append_encoded(
        self,
        stream_id: str,
        expected_version: int | None,
        events: Sequence[Event],
        encoded: list[tuple[str, bytes]],
        machine: Machine,
        command_id: str | None,
        epoch: int | None,
    ) -> AppendResult:
        """``append`` for events validated and encoded by the caller (outside the batch)."""
        epoch = self._context.epoch if epoch is None else epoch
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgument(f"epoch must be an int >= 0, got {epoch!r}")
        if command_id is not None:
            known = self.known_command(command_id)
            if known is not None:
                return known
        if self._declared_in is not self._mark and self._context.declarations is not None:
            # Once per work, before its first event: a work that fails takes them with it.
            self._declared_in = self._mark
            declarations.record_if_changed(self, self._context, epoch)
        head = self.head_of(stream_id)
        if expected_version is not None and head.version != expected_version:
            raise ConcurrencyError(stream_id, expected_version, head.version)
        if epoch < self.epoch:
            raise FencedOut(epoch, self.epoch)
        recorded_at = self._recorded_at
        if recorded_at is None:
            recorded_at = self._recorded_at = self._context.recorded_now()
        first_version = head.version + 1
        position = self.position
        previous = self.last_hash
        linked_row = chain.linked_row
        rows = []
        for event, (event_type, payload) in zip(events, encoded, strict=True):
            state = machine.next_state(head, event, event_type)
            position += 1
            version = head.version + 1
            head = StreamHead(stream_id, version, state)
            row = linked_row(
                previous, position, stream_id, version, event_type,
                recorded_at, epoch, command_id, state, payload,
            )  # fmt: skip
            previous = row[9]
            rows.append(row)
        first = self.position + 1
        self.position, self.last_hash, self.epoch = position, previous, epoch
        self.appended.extend(rows)
        self._work_heads[stream_id] = head
        if command_id is not None:
            self._open_commands.setdefault(command_id, (stream_id, first))
        if self._in_sql:
            self._write(rows, ())
        else:
            self._rows.extend(rows)
        # The built-in heads are buffered above; the other projections see each event now,
        # those that may act on its type, as a recorded event made for them alone. One that
        # runs SQL reaches the database through ``self.cursor``, which flushes first.
        folding = self._context.folding
        cursor = self.cursor
        for row, event in zip(rows, events, strict=True):
            projections = folding(row[3])
            if projections:
                recorded = RecordedEvent.from_row(row, event)
                for projection in projections:
                    projection.apply(cursor, recorded)
        return AppendResult(
            stream_id=stream_id,
            first_version=first_version,
            last_version=head.version,
            first_position=first,
            last_position=position,
            state=head.state or "",
        )

    # -- after the commit ----------------------------------------------------------------

    def remember(self) -> None:
        """Keep what is now true of the log for the next batch (after a successful commit)."""
        cache = self._context.cache
        cache.valid = True
        cache.tail = (self.position, self.last_hash, self.epoch)
        heads = cache.heads
        if len(heads) + len(self._heads) > HEAD_CACHE_SIZE:
            heads.clear()
        heads.update(self._heads)
