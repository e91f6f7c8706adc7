"""The event log: appends through the group commit, reads, and opening a log file.

Invariants:
- positions are 1-based, gap-free and commit-ordered; versions are contiguous per stream;
- every row links into the hash chain (``engine.chain``);
- every event is a legal transition of its stream's machine and records the state it led to;
- projections are updated in the same transaction as the append;
- a ``command_id`` is accepted once, forever; a repeat returns the first outcome.

The parts, each backend-neutral unless it says otherwise:
- ``engine.write.group_commit``: concurrent writers of one process share one transaction and sync;
- ``engine.write.transaction``: one batch, one scope per caller, rows written once per batch;
- ``engine.reads``: validated reads of committed events;
- ``engine.storage``: the seam a database backend implements;
- ``engine.storage.sqlite.storage``: the SQLite backend (the default and the reference).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from engine import signals
from engine.clock import Clock, SystemClock, format_time
from engine.declarations import SYSTEM_KIND, declared, with_system
from engine.errors import InvalidArgument, StorageError
from engine.events import Event, EventCodec
from engine.machines import Machines, MachineSpec
from engine.projection import Projection, ProjectionSet
from engine.reads import MAX_POSITION, MAX_READ_LIMIT, LogReads
from engine.storage import Storage, Sync, open_storage, translated
from engine.streams import StreamsProjection
from engine.write.batch import run_batch
from engine.write.context import BatchContext, LogStats, WriterCache
from engine.write.group_commit import GroupCommit
from engine.write.lone import Plain, append_now
from engine.write.transaction import MAX_COMMAND_ID, AppendResult, Transaction, check_arguments

T = TypeVar("T")


class Log(LogReads):
    """An open event log. Thread-safe; use one per process and path."""

    def __init__(
        self,
        storage: Storage,
        machines: Machines,
        projections: ProjectionSet,
        clock: Clock,
        max_payload_bytes: int,
        max_batch: int,
    ) -> None:
        self.storage = storage
        self.path = storage.path
        self.machines = machines
        self.projections = projections
        self.clock = clock
        self.max_batch = max_batch
        self.codec = EventCodec(machines.event_classes, max_payload_bytes)
        # What a batch needs of this log, as one object: the batch never sees the log.
        self.parts = BatchContext(storage, machines, self.codec, projections, clock, self.announce)
        self._group = GroupCommit(lambda gather: run_batch(self.parts, gather), max_batch)
        self._head_changed = threading.Condition()
        self._waiting = 0

    @property
    def epoch(self) -> int:
        """The tenure this process appends under (set by the runtime, ``fence``)."""
        return self.parts.epoch

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self.parts.epoch = epoch

    @property
    def stats(self) -> LogStats:
        return self.parts.stats

    @property
    def cache(self) -> WriterCache:
        return self.parts.cache

    def folding(self, event_type: str) -> tuple[Projection, ...]:
        """The projections (besides the heads) that may act on events of ``event_type``."""
        return self.parts.folding(event_type)

    @property
    def readonly(self) -> bool:
        return self.storage.readonly

    def connection(self) -> Any:
        """This thread's read connection (SQL reads of the read models)."""
        return self.storage.connection()

    def close(self) -> None:
        """Close every connection this process opened; later use raises ``StorageError``."""
        self.storage.close()

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
        # Everything that does not depend on the log's state is done here, in the caller's
        # thread, so that it overlaps the batch being committed instead of lengthening it.
        if (
            type(expected_version) is not int
            or expected_version < 0
            or type(events) not in (list, tuple)
            or not events
            or command_id is not None
        ):
            check_arguments(expected_version, events, command_id)  # the full check, and why
        machine = self.machines.for_stream(stream_id)
        encoded = list(map(self.codec.encode, events))
        plain: Plain | None = None
        if command_id is None:
            # Without a command id, an append alone on a quiet log skips the batch and its
            # scopes: ``engine.write.lone``.
            plain = (stream_id, expected_version, events, encoded, machine, epoch)
            if not self.storage.readonly:
                done = append_now(self.parts, self._group, plain)
                if done is not None:
                    return done
        # (With its expected version: the work only appends, so a batch may run it again.)
        return self._submit(
            lambda tx: tx.append_encoded(
                stream_id, expected_version, events, encoded, machine, command_id, epoch
            ),
            stream_id,
            expected_version,
            plain,
        )

    def write(self, work: Callable[[Transaction], T], stream_id: str | None = None) -> T:
        """Run ``work`` inside a write transaction shared with concurrent callers.

        If ``work`` raises, only its changes are undone and the error is re-raised here, after
        the batch commits. The return value is handed back only after the COMMIT that made it
        durable. ``stream_id``: the stream ``work`` appends to, when known, so that the batch
        reads the heads of its streams together (one round trip on PostgreSQL).
        """
        return self._submit(work, stream_id, None)

    def _submit(
        self,
        work: Callable[[Transaction], T],
        stream_id: str | None,
        expected: int | None,
        plain: Plain | None = None,
    ) -> T:
        """``write``; ``expected``, ``plain``: a plain append's expected version and its
        arguments (``Request``)."""
        if self.storage.readonly:
            raise StorageError(f"{self.path}: opened read-only")
        result: T = self._group.submit(work, stream_id, expected, plain)
        return result

    def announce(self, position: int) -> None:
        """After a commit: wake local waiters and send the in-process signal."""
        if self._waiting:
            self.wake()
        if signals.committed.receivers:
            signals.committed.send(self, position=position)

    # -- waiting for commits -------------------------------------------------------------

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
        """A number that changes whenever another connection (any process) commits, read on
        this thread's connection. The notifier polls it."""
        return self.storage.data_version()

    def wake(self) -> None:
        """Wake ``wait_for`` callers to re-read the head (called by the notifier)."""
        with self._head_changed:
            self._head_changed.notify_all()

    # -- maintenance ---------------------------------------------------------------------

    def rebuild(self) -> dict[str, str]:
        """Drop and refold every projection from the log; returns their content hashes."""

        def work(tx: Transaction) -> dict[str, str]:
            tx.invalidate()
            self.projections.rebuild(tx.cursor, tx.events_after)
            return self.projections.content_hash(tx.cursor)

        return self.write(work)

    def content_hash(self) -> dict[str, str]:
        """The content hash of every projection as committed now."""
        with self.storage.content_cursor() as cursor:
            return self.projections.content_hash(cursor)


def _open(
    storage: Storage,
    machines: Sequence[MachineSpec] | Machines,
    projections: Sequence[Projection],
    clock: Clock,
    max_payload_bytes: int,
    max_batch: int,
    record_declarations: bool = False,
) -> Log:
    # Every log reads and writes the system stream of its declarations (ADR 0060).
    if isinstance(machines, Machines):
        registry = machines
        if SYSTEM_KIND not in machines.by_kind:
            registry = Machines(with_system(m.spec for m in machines.by_kind.values()))
    else:
        registry = Machines(with_system(machines))
    projection_set = ProjectionSet([StreamsProjection(), *projections], registry)
    log = Log(storage, registry, projection_set, clock, max_payload_bytes, max_batch)
    if record_declarations:
        log.parts.declarations = declared(registry)
    return log


def open_log_with(
    storage: Storage,
    machines: Sequence[MachineSpec] | Machines,
    projections: Sequence[Projection] = (),
    *,
    clock: Clock | None = None,
    max_payload_bytes: int = 1 << 20,
    max_batch: int = 256,
    record_declarations: bool = False,
) -> Log:
    """Open a log on any backend of the storage seam (``open_log`` is this for SQLite):
    migrate its schema, then install, rebuild or catch up the projections. The log owns
    ``storage`` from here on, and closes it on failure.

    ``record_declarations``: before the first event this process writes, append the code's
    machine declarations to ``log:declarations`` when they differ from the last ones the log
    recorded (ADR 0060; the server does, so its audits judge each event by its own rules).

    Raises:
        SchemaTooNew, NotALog, StorageError: as ``open_log``.
    """
    log = _open(
        storage,
        machines,
        projections,
        clock or SystemClock(),
        max_payload_bytes,
        max_batch,
        record_declarations,
    )
    try:
        storage.migrate(format_time(log.clock.now()))

        def install(tx: Transaction) -> None:
            tx.invalidate()
            log.projections.install(tx.cursor, tx.events_after)

        log.write(install)
    except BaseException as ex:
        log.close()
        failure = translated(storage, ex)
        if failure is ex:
            raise
        raise failure from ex
    return log


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
    storage = open_storage(path, readonly=True)
    log = _open(storage, machines, projections, SystemClock(), 1 << 20, 1)
    try:
        storage.check_current({p.name: p.version for p in log.projections.projections})
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
    record_declarations: bool = False,
) -> Log:
    """Open (creating and migrating as needed) the log at ``path``: a SQLite file, or a
    ``postgresql://`` URL (``engine.storage.postgres.storage``; ``sync`` and ``busy_timeout_ms`` are
    SQLite's).

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
    storage = open_storage(path, sync=sync, busy_timeout_ms=busy_timeout_ms)
    return open_log_with(
        storage,
        machines,
        projections,
        clock=clock,
        max_payload_bytes=max_payload_bytes,
        max_batch=max_batch,
        record_declarations=record_declarations,
    )


__all__ = [
    "MAX_COMMAND_ID",
    "MAX_POSITION",
    "MAX_READ_LIMIT",
    "AppendResult",
    "Log",
    "LogStats",
    "Sync",
    "Transaction",
    "open_log",
    "open_log_readonly",
    "open_log_with",
]
