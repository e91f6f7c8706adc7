"""The event log: one SQLite WAL file written through APSW.

Invariants:
- positions are 1-based, gap-free and commit-ordered; versions are contiguous per stream;
- every row links into the hash chain (``engine.chain``);
- every event is a legal transition of its stream's machine and records the state it led to;
- projections are updated in the same transaction as the append;
- a ``command_id`` is accepted once, forever; a repeat returns the first outcome.

Writers in one process share transactions (group commit): callers queue their work, one of
them leads a batch inside one ``BEGIN IMMEDIATE`` transaction, each caller's work runs in its
own savepoint so that its failure rolls back only its own part, and every caller is answered
after the single COMMIT. Writers in other processes serialise on ``BEGIN IMMEDIATE`` with a
busy timeout. Connections are opened lazily per thread and per process, never across fork.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import apsw
import msgspec

from engine import chain, signals
from engine.clock import Clock, SystemClock, format_time
from engine.errors import (
    ConcurrencyError,
    EngineError,
    FencedOut,
    InvalidArgument,
    NeedsMigration,
    NotALog,
    StorageError,
)
from engine.events import Event, EventCodec, RecordedEvent
from engine.machines import Machines, MachineSpec, StreamHead
from engine.projection import Projection, ProjectionSet
from engine.schema import LATEST, migrate
from engine.streams import StreamsProjection

Sync = Literal["full", "normal"]
T = TypeVar("T")

MAX_COMMAND_ID = 256
# Each commit writes every page it touched to the WAL in full. Event rows are a few hundred
# bytes and one append touches four B-trees (events, its (stream_id, version) index, streams,
# commands or a read model), so 2 KiB pages halve the bytes written per commit against 4 KiB
# (measured in ADR 0009); scans and big payloads lose little.
PAGE_SIZE = 2048
MAX_READ_LIMIT = 10_000
MAX_POSITION = (1 << 63) - 1  # SQLite's INTEGER range
_COLUMNS = (
    "position, stream_id, version, event_type, recorded_at, epoch, command_id, state, payload, hash"
)


class AppendResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one append produced (or, when ``duplicate``, what the first one produced)."""

    stream_id: str
    first_version: int
    last_version: int
    first_position: int
    last_position: int
    state: str
    duplicate: bool = False


@dataclass
class LogStats:
    """Counters of this process's writes, for metrics. Updated only by the batch leader."""

    commits: int = 0
    events: int = 0
    commit_seconds: float = 0.0
    batch_sizes: dict[int, int] = field(default_factory=dict)  # batch size -> batches


@dataclass
class _Request:
    work: Callable[[Transaction], Any]
    done: threading.Event | None = None  # made only for a caller that has to wait
    lead: bool = False
    result: Any = None
    error: BaseException | None = None


def _translate(ex: apsw.Error) -> EngineError:
    """The one place apsw errors become engine errors."""
    if isinstance(ex, apsw.NotADBError):
        return NotALog(f"not a SQLite database: {ex}")
    return StorageError(f"sqlite: {type(ex).__name__}: {ex}")


class Transaction:
    """The write side of one batch: appends and reads inside the open transaction."""

    def __init__(self, log: Log, cursor: Any) -> None:
        self._log = log
        self.cursor = cursor
        row = cursor.execute(
            "SELECT position, hash, epoch FROM events ORDER BY position DESC LIMIT 1"
        ).fetchall()
        # Epochs never decrease along the log (older ones are fenced out), so the last row's
        # epoch is the newest tenure.
        self.position: int
        self.last_hash: bytes
        self.epoch: int
        self.position, self.last_hash, self.epoch = row[0] if row else (0, chain.GENESIS, 0)
        self.start_position = self.position
        self.appended: list[RecordedEvent] = []
        # Commands opened by the current work: command_id -> (first stream, first position).
        # Their row in `commands` is written when the work succeeds, spanning all its appends.
        self._open_commands: dict[str, tuple[str, int]] = {}

    def mark(self) -> tuple[int, bytes, int, int]:
        self._open_commands.clear()
        return self.position, self.last_hash, self.epoch, len(self.appended)

    def restore(self, mark: tuple[int, bytes, int, int]) -> None:
        self.position, self.last_hash, self.epoch, count = mark
        del self.appended[count:]
        self._open_commands.clear()

    def close_work(self) -> None:
        """Record the commands the finished work appended under (one row each, forever)."""
        for command_id, (stream_id, first) in self._open_commands.items():
            self.cursor.execute(
                "INSERT INTO commands VALUES (?, ?, ?, ?)",
                (command_id, stream_id, first, self.position),
            )
        self._open_commands.clear()

    def known_command(self, command_id: str) -> AppendResult | None:
        """The first outcome of a command accepted earlier (None if new or opened by this work)."""
        if command_id in self._open_commands:
            return None
        return self._log._command_outcome(self.cursor, command_id)

    def head_of(self, stream_id: str) -> StreamHead:
        """The stream's version and state as of this transaction."""
        return _head(self.cursor, stream_id)

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
        log = self._log
        _check_arguments(expected_version, events, command_id, at_head_allowed=True)
        machine = log.machines.for_stream(stream_id)
        encoded = [log.codec.encode(event) for event in events]
        epoch = log.epoch if epoch is None else epoch
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgument(f"epoch must be an int >= 0, got {epoch!r}")
        cur = self.cursor
        if command_id is not None:
            known = self.known_command(command_id)
            if known is not None:
                return known
        head = self.head_of(stream_id)
        if expected_version is not None and head.version != expected_version:
            raise ConcurrencyError(stream_id, expected_version, head.version)
        if epoch < self.epoch:
            raise FencedOut(epoch, self.epoch)
        recorded_at = format_time(log.clock.now())
        rows: list[tuple[Any, ...]] = []
        for event, (event_type, payload) in zip(events, encoded, strict=True):
            state = machine.next_state(head, event, event_type)
            head = StreamHead(stream_id, head.version + 1, state)
            position = self.position + len(rows) + 1
            rows.append(
                (
                    position,
                    stream_id,
                    head.version,
                    event_type,
                    recorded_at,
                    epoch,
                    command_id,
                    state,
                    payload,
                )
            )
        previous = self.last_hash
        recorded = []
        for event, row in zip(events, rows, strict=True):
            previous = chain.link(previous, *row)
            cur.execute("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)", (*row, previous))
            recorded.append(
                RecordedEvent(
                    position=row[0],
                    stream_id=stream_id,
                    version=row[2],
                    event_type=row[3],
                    recorded_at=recorded_at,
                    epoch=epoch,
                    command_id=command_id,
                    state=row[7],
                    event=event,
                    hash=previous.hex(),
                )
            )
        first, last = rows[0][0], rows[-1][0]
        if command_id is not None:
            self._open_commands.setdefault(command_id, (stream_id, first))
        log.projections.apply(cur, recorded)
        self.position, self.last_hash, self.epoch = last, previous, epoch
        self.appended.extend(recorded)
        return AppendResult(
            stream_id=stream_id,
            first_version=rows[0][2],
            last_version=head.version,
            first_position=first,
            last_position=last,
            state=head.state or "",
        )


def _head(cursor: Any, stream_id: str) -> StreamHead:
    row = cursor.execute(StreamsProjection.head_sql, (stream_id,)).fetchall()
    return StreamHead(stream_id, row[0][0], row[0][1]) if row else StreamHead(stream_id, 0, None)


def _check_arguments(
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


class Log:
    """An open event log. Thread-safe; use one per process and path."""

    def __init__(
        self,
        path: str,
        machines: Machines,
        projections: ProjectionSet,
        clock: Clock,
        sync: Sync,
        busy_timeout_ms: int,
        max_payload_bytes: int,
        max_batch: int,
    ) -> None:
        self.path = path
        self.machines = machines
        self.projections = projections
        self.clock = clock
        self.sync = sync
        self.busy_timeout_ms = busy_timeout_ms
        self.max_batch = max_batch
        self.codec = EventCodec(machines.event_classes, max_payload_bytes)
        self.epoch = 0
        self.readonly = False
        self.stats = LogStats()
        self._closed = False
        self._local = threading.local()
        self._connections: list[tuple[int, Any]] = []
        self._connections_lock = threading.Lock()
        self._reset_writer_state()

    # -- connections ---------------------------------------------------------------------

    def _reset_writer_state(self) -> None:
        self._pid = os.getpid()
        self._queue: list[_Request] = []
        self._queue_lock = threading.Lock()
        self._leading = False
        self._head_changed = threading.Condition()
        self._waiting = 0
        self._last_batch = 0

    def connection(self) -> Any:
        """This thread's connection, opened on first use in this process."""
        if self._closed:
            raise StorageError(f"{self.path}: the log is closed")
        pid = os.getpid()
        held = getattr(self._local, "held", None)
        if held is not None and held[0] == pid:
            return held[1]
        try:
            if self.readonly:
                conn = apsw.Connection(
                    f"file:{quote(self.path)}?mode=ro",
                    flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
                )
                conn.set_busy_timeout(self.busy_timeout_ms)
            else:
                conn = apsw.Connection(self.path)
                conn.set_busy_timeout(self.busy_timeout_ms)
                # Only takes effect when the file is created (before WAL is switched on).
                conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {self.sync.upper()}")
        except apsw.Error as ex:
            raise _translate(ex) from ex
        self._local.held = (pid, conn)
        with self._connections_lock:
            self._connections.append((pid, conn))
        return conn

    def close(self) -> None:
        """Close every connection this process opened; later use raises ``StorageError``.

        A connection that another thread is using at this moment is left to that thread: its
        next call on the log fails cleanly instead (apsw refuses to close it under its feet).
        """
        self._closed = True
        with self._connections_lock:
            mine = [c for pid, c in self._connections if pid == os.getpid()]
            self._connections.clear()
        for conn in mine:
            with contextlib.suppress(apsw.ThreadingViolationError):
                conn.close()
        self._local = threading.local()

    def fence(self, epoch: int) -> None:
        """Appends of this process carry ``epoch`` from now on: the tenure it holds. The one
        setter, called by whoever holds the current tenure; an older epoch is refused by the
        append."""
        self.epoch = epoch

    # -- writes --------------------------------------------------------------------------

    def append(
        self,
        stream_id: str,
        expected_version: int,
        events: Sequence[Event],
        command_id: str | None = None,
        epoch: int | None = None,
    ) -> AppendResult:
        """Append ``events`` to ``stream_id`` atomically, then return after the commit.

        Raises:
            ConcurrencyError: the stream is not at ``expected_version`` (0 = must not exist).
            InvalidTransition: an event is not legal from the stream's state.
            FencedOut: ``epoch`` (default ``self.epoch``) is older than the log's newest.
            InvalidArgument: malformed arguments, unknown stream kind or event type, an event
                that does not match its schema, or a payload over the size limit.
            StorageError: SQLite failed (I/O, locked past the busy timeout).
        A known ``command_id`` appends nothing and returns the first outcome with
        ``duplicate=True``. Nothing is appended whenever an error is raised.
        """
        if expected_version is None:
            raise InvalidArgument("expected_version is required (0 = the stream must not exist)")
        return self.write(
            lambda tx: tx.append(stream_id, expected_version, events, command_id, epoch)
        )

    def write(self, work: Callable[[Transaction], T]) -> T:
        """Run ``work`` inside a write transaction shared with concurrent callers.

        ``work`` runs in its own savepoint: if it raises, only its changes are rolled back and
        the error is re-raised here, after the batch commits. The return value is handed back
        only after the COMMIT that made it durable.
        """
        if self.readonly:
            raise StorageError(f"{self.path}: opened read-only")
        if self._pid != os.getpid():
            self._reset_writer_state()
        request = _Request(work)
        with self._queue_lock:
            self._queue.append(request)
            lead = not self._leading
            if lead:
                self._leading = True
            else:
                request.done = threading.Event()
        if request.done is not None:
            request.done.wait()
            lead = request.lead
        if lead:
            self._lead()
        if request.error is not None:
            raise request.error
        return request.result  # type: ignore[no-any-return]

    def _lead(self) -> None:
        if self._last_batch > 1 and len(self._queue) < self._last_batch:
            # Writers are concurrent but some have not queued yet (they are still being woken
            # from the last commit). Yield the GIL once so they can join this batch instead of
            # each paying for a commit of their own.
            time.sleep(0)
        with self._queue_lock:
            batch = self._queue[: self.max_batch]
            del self._queue[: self.max_batch]
            self._last_batch = len(batch)
        try:
            self._commit(batch)
        finally:
            with self._queue_lock:
                if self._queue:
                    successor = self._queue[0]
                    successor.lead = True
                    successor.done.set()  # type: ignore[union-attr]
                else:
                    self._leading = False
            for request in batch:
                if request.done is not None:
                    request.done.set()

    def _commit(self, batch: list[_Request]) -> None:
        started = time.perf_counter()
        cur = self.connection().cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            tx = Transaction(self, cur)
            registered = self.projections.prepare(cur, self._events_after_in(tx))
            # A lone request needs no savepoint: if it fails, the whole transaction goes.
            shared = len(batch) > 1
            for request in batch:
                mark = tx.mark()
                if shared:
                    cur.execute("SAVEPOINT work")
                try:
                    request.result = request.work(tx)
                    tx.close_work()
                except BaseException as ex:  # scoped to its caller, re-raised in its thread
                    request.error = _translate(ex) if isinstance(ex, apsw.Error) else ex
                    tx.restore(mark)
                    if not shared:
                        cur.execute("ROLLBACK")
                        return
                    cur.execute("ROLLBACK TO work")
                if shared:
                    cur.execute("RELEASE work")
            if tx.appended:
                self.projections.fence_lagging(cur, registered, tx.start_position)
            cur.execute("COMMIT")
        except BaseException as ex:
            if cur.connection.in_transaction:
                cur.execute("ROLLBACK")
            failure = _translate(ex) if isinstance(ex, apsw.Error) else ex
            for request in batch:
                request.result, request.error = None, request.error or failure
            return
        if tx.appended:
            stats = self.stats
            stats.commits += 1
            stats.events += len(tx.appended)
            stats.commit_seconds += time.perf_counter() - started
            stats.batch_sizes[len(batch)] = stats.batch_sizes.get(len(batch), 0) + 1
            self._announce(tx.position)

    def _announce(self, position: int) -> None:
        if self._waiting:
            self.wake()
        if signals.committed.receivers:
            signals.committed.send(self, position=position)

    # -- reads ---------------------------------------------------------------------------

    def _decode(self, row: Sequence[Any]) -> RecordedEvent:
        return RecordedEvent(
            position=row[0],
            stream_id=row[1],
            version=row[2],
            event_type=row[3],
            recorded_at=row[4],
            epoch=row[5],
            command_id=row[6],
            state=row[7],
            event=self.codec.decode(row[3], row[8]),
            hash=row[9].hex(),
        )

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        try:
            rows: list[Any] = self.connection().execute(sql, params).fetchall()
        except apsw.Error as ex:
            raise _translate(ex) from ex
        return rows

    def read_stream(self, stream_id: str, after_version: int = 0) -> list[RecordedEvent]:
        """Events of one stream with ``version > after_version``, in version order."""
        self.machines.for_stream(stream_id)
        if (
            isinstance(after_version, bool)
            or not isinstance(after_version, int)
            or not 0 <= after_version <= MAX_POSITION
        ):
            raise InvalidArgument(
                f"after_version must be an int in 0..{MAX_POSITION}, got {after_version!r}"
            )
        rows = self._query(
            f"SELECT {_COLUMNS} FROM events WHERE stream_id = ? AND version > ? ORDER BY version",
            (stream_id, after_version),
        )
        return [self._decode(row) for row in rows]

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """At most ``limit`` events with ``position > after_position``, in position order."""
        if (
            isinstance(after_position, bool)
            or not isinstance(after_position, int)
            or not 0 <= after_position <= MAX_POSITION
        ):
            raise InvalidArgument(
                f"after_position must be an int in 0..{MAX_POSITION}, got {after_position!r}"
            )
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= MAX_READ_LIMIT
        ):
            raise InvalidArgument(f"limit must be an int in 1..{MAX_READ_LIMIT}, got {limit!r}")
        rows = self._query(
            f"SELECT {_COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (after_position, limit),
        )
        return [self._decode(row) for row in rows]

    def iter_all(self, after_position: int = 0, cursor: Any = None) -> Iterator[RecordedEvent]:
        """Every event after a position, streamed (replays and rebuilds)."""
        cur = cursor or self.connection().cursor()
        for row in cur.execute(
            f"SELECT {_COLUMNS} FROM events WHERE position > ? ORDER BY position", (after_position,)
        ):
            yield self._decode(row)

    def iter_rows(self, after_position: int = 0) -> Iterator[tuple[Any, ...]]:
        """Raw rows after a position, in position order, payloads undecoded (audits)."""
        cur = self.connection().cursor()
        yield from cur.execute(
            f"SELECT {_COLUMNS} FROM events WHERE position > ? ORDER BY position",
            (after_position,),
        )

    def hash_at(self, position: int) -> bytes | None:
        """The chain hash stored at a position (None past the head)."""
        rows = self._query("SELECT hash FROM events WHERE position = ?", (position,))
        return bytes(rows[0][0]) if rows else None

    def head(self) -> int:
        """The position of the last committed event (0 for an empty log)."""
        return int(self._query("SELECT coalesce(max(position), 0) FROM events")[0][0])

    def stream_head(self, stream_id: str) -> StreamHead:
        """A stream's committed version and state (version 0, state None if it does not exist)."""
        self.machines.for_stream(stream_id)
        try:
            return _head(self.connection().cursor(), stream_id)
        except apsw.Error as ex:
            raise _translate(ex) from ex

    def _command_outcome(self, cur: Any, command_id: str) -> AppendResult | None:
        rows = cur.execute(
            "SELECT c.stream_id, c.first_position, c.last_position, f.version, l.version, l.state"
            " FROM commands c JOIN events f ON f.position = c.first_position"
            " JOIN events l ON l.position = c.last_position WHERE c.command_id = ?",
            (command_id,),
        ).fetchall()
        if not rows:
            return None
        stream_id, first, last, first_version, last_version, state = rows[0]
        return AppendResult(
            stream_id=stream_id,
            first_version=first_version,
            last_version=last_version,
            first_position=first,
            last_position=last,
            state=state,
            duplicate=True,
        )

    def wait_for(self, after_position: int, timeout: float) -> bool:
        # (after_position is compared, never sent to SQLite: any int is fine.)
        """Block until the head passes ``after_position`` (True) or ``timeout`` runs out.

        Wakes at once for commits made through this object; commits by other processes are
        seen through ``engine.notifier``, which calls ``wake``.
        """
        with self._head_changed:
            self._waiting += 1
            try:
                return self._head_changed.wait_for(lambda: self.head() > after_position, timeout)
            finally:
                self._waiting -= 1

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version`` on this thread's connection: it changes whenever
        another connection (any process) commits. The notifier polls it."""
        return int(self._query("PRAGMA data_version")[0][0])

    def wake(self) -> None:
        """Wake ``wait_for`` callers to re-read the head (called by the notifier)."""
        with self._head_changed:
            self._head_changed.notify_all()

    # -- maintenance ---------------------------------------------------------------------

    def rebuild(self) -> dict[str, str]:
        """Drop and refold every projection from the log; returns their content hashes."""

        def work(tx: Transaction) -> dict[str, str]:
            self.projections.rebuild(tx.cursor, self._events_after_in(tx))
            return self.projections.content_hash(tx.cursor)

        return self.write(work)

    def content_hash(self) -> dict[str, str]:
        """The content hash of every projection as committed now."""
        cur = self.connection().cursor()
        cur.execute("BEGIN")
        try:
            return self.projections.content_hash(cur)
        finally:
            cur.execute("COMMIT")

    def verify_chain(self, after: int = 0) -> list[chain.Violation]:
        """Check the hash chain and positions from ``after`` to the head."""
        cur = self.connection().cursor()
        previous = chain.GENESIS
        if after:
            rows = cur.execute("SELECT hash FROM events WHERE position = ?", (after,)).fetchall()
            if not rows:
                return [chain.Violation(after, "missing_row", "no event at the start position")]
            previous = rows[0][0]
        rows = cur.execute(
            f"SELECT {_COLUMNS} FROM events WHERE position > ? ORDER BY position", (after,)
        )
        return list(chain.check_rows(rows, previous, after))

    def _events_after_in(self, tx: Transaction) -> Callable[[int], Iterator[RecordedEvent]]:
        connection = tx.cursor.connection
        return lambda position: self.iter_all(position, connection.cursor())


def snapshot(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Copy a log consistently (SQLite's backup API) without writing to the source: audits
    work on the copy, so they can migrate and refold it while the inputs stay untouched.

    Raises:
        NotALog: the source is not a SQLite database.
        StorageError: it could not be read.
    """
    if not Path(source).is_file():
        raise NotALog(f"{os.fspath(source)}: no such file")
    try:
        src = apsw.Connection(
            f"file:{os.fspath(source)}?mode=ro",
            flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
        )
        dst = apsw.Connection(os.fspath(target))
        with dst.backup("main", src, "main") as backup:
            backup.step()
        dst.close()
        src.close()
    except apsw.Error as ex:
        raise _translate(ex) from ex


def open_log_readonly(
    path: str | os.PathLike[str],
    machines: Sequence[MachineSpec] | Machines,
    projections: Sequence[Projection] = (),
) -> Log:
    """Open an existing, current log without writing anything to it (audits, reports).

    Raises:
        NotALog: no such file, or not a foldline log.
        NeedsMigration: an older schema, or projections whose version or checkpoint is not
            current: open a copy with ``open_log`` instead.
    """
    path = os.fspath(path)
    if not Path(path).is_file():
        raise NotALog(f"{path}: no such file")
    registry = machines if isinstance(machines, Machines) else Machines(machines)
    projection_set = ProjectionSet([StreamsProjection(), *projections], registry)
    log = Log(path, registry, projection_set, SystemClock(), "full", 10_000, 1 << 20, 1)
    log.readonly = True
    try:
        conn = log.connection()
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
        if "schema_migrations" not in tables:
            raise NotALog(f"{path}: not a foldline log")
        schema = conn.execute("SELECT max(number) FROM schema_migrations").fetchall()[0][0]
        stored = dict(
            conn.execute(
                "SELECT name, version FROM projections WHERE checkpoint IS NULL"
            ).fetchall()
        )
        wanted = {p.name: p.version for p in projection_set.projections}
        if schema != LATEST or any(stored.get(n) != v for n, v in wanted.items()):
            raise NeedsMigration(f"{path}: schema or projections are not current")
    except apsw.Error as ex:
        log.close()
        raise _translate(ex) from ex
    except BaseException:
        log.close()
        raise
    return log


def open_log(
    path: str | os.PathLike[str],
    machines: Sequence[MachineSpec] | Machines,
    projections: Sequence[Projection] = (),
    *,
    clock: Clock | None = None,
    sync: Sync = "full",
    busy_timeout_ms: int = 10_000,
    max_payload_bytes: int = 1 << 20,
    max_batch: int = 256,
) -> Log:
    """Open (creating and migrating as needed) the log at ``path``.

    ``sync="full"`` makes every acknowledged append survive a power cut; ``"normal"`` survives
    a process crash only. Projections are installed, rebuilt if their version changed, and
    caught up before this returns.

    Raises:
        SchemaTooNew: the file was written by a newer release.
        NotALog: the file is not a foldline log.
        InvalidArgument: a setting is out of range.
        StorageError: SQLite could not open or migrate the file.
    """
    if sync not in ("full", "normal"):
        raise InvalidArgument(f"sync must be 'full' or 'normal', got {sync!r}")
    if busy_timeout_ms < 5000:
        raise InvalidArgument("busy_timeout_ms must be at least 5000: writers wait, never fail")
    path = os.fspath(path)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    registry = machines if isinstance(machines, Machines) else Machines(machines)
    log = Log(
        path,
        registry,
        ProjectionSet([StreamsProjection(), *projections], registry),
        clock or SystemClock(),
        sync,
        busy_timeout_ms,
        max_payload_bytes,
        max_batch,
    )
    try:
        migrate(log.connection(), path, format_time(log.clock.now()))
        log.write(lambda tx: log.projections.install(tx.cursor, log._events_after_in(tx)))
    except apsw.Error as ex:
        log.close()
        raise _translate(ex) from ex
    except BaseException:
        log.close()
        raise
    return log
