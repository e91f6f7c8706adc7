"""The storage seam: what the log needs from a database, and nothing more.

Everything backend-neutral lives above this seam and is shared by every backend: the group
commit (``engine.write.group_commit``), the machine checks, the hash chain, the command table's
semantics and the deferred row buffers (``engine.write.transaction``), the projection framework
(``engine.projection``) and the validated reads (``engine.reads``). A backend implements the
protocols below, and nothing else: SQLite (``engine.storage.sqlite``) is the reference, PostgreSQL
(``engine.storage.postgres``) the optional one.

What a backend may do beyond the minimum is declared here too, never found out by looking at
the object: ``Writer.capabilities`` (flags whose ``False`` is always correct, only slower),
``Storage.wakeups`` (None: the notifier polls ``data_version``) and ``Storage.lost`` (None: the
log can be written). ``tests/arch`` refuses ``getattr``/``hasattr`` on a storage or a writer.

A row of the ``events`` table travels across the seam as a plain tuple in column order:
``(position, stream_id, version, event_type, recorded_at, epoch, command_id, state, payload,
hash)`` (``engine.chain.Row``). Cursors handed to projections and domain views are DB-API style
and take ``?`` placeholders and SQLite's dialect; a backend whose driver wants another style
adapts them. The built-in heads projection refolds from the ``events`` table in SQL, so that
cursor sees ``events`` too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from engine.errors import EngineError

# How far a commit is synced: "full" survives a power cut, "normal" a process crash (SQLite's).
Sync = Literal["full", "normal"]
# position, stream_id, version, event_type, recorded_at, epoch, command_id, state, payload, hash
EventRow = tuple[Any, ...]
# stream_id, kind, version, state, first_position, last_position, created_at, updated_at
HeadRow = tuple[Any, ...]
# command_id, stream_id, first_position, last_position
CommandRow = tuple[str, str, int, int]
# stream_id, first_position, last_position, first_version, last_version, last_state
CommandOutcome = tuple[str, int, int, int, int, str]


@dataclass(frozen=True)
class Migration:
    """One numbered step of a backend's schema. Numbers mean the same tables on every
    backend, so a log at migration N can be copied and compared across them."""

    number: int
    name: str
    sql: str


@dataclass(frozen=True)
class WriterCapabilities:
    """What a writer does beyond the protocol's minimum. Every flag off is correct; a flag on
    saves round trips where a statement waits for a server (ADR 0026)."""

    # ``begin`` waits for a server: the batch's leader opens the transaction while its callers
    # are still queueing, instead of after (``engine.write.batch``).
    begins_while_gathering: bool = False
    # ``stream_heads`` reads many heads in one round trip, and ``collided`` tells the duplicate
    # key that a stream wrongly taken as new makes of the commit: a batch of appends may then
    # take the streams they say are new on trust (``Transaction.read_heads``).
    reads_heads_at_once: bool = False


class Wakeups(Protocol):
    """A backend's own news of other processes' commits (PostgreSQL's LISTEN), used by
    ``engine.notifier`` instead of polling ``Storage.data_version``."""

    def run(
        self, wake: Callable[[], None], stop: threading.Event, listening: threading.Event
    ) -> None:
        """Call ``wake`` after commits made elsewhere until ``stop`` is set, keeping
        ``listening`` set while a wake-up would be delivered. A lost wake-up costs latency,
        never correctness: waiters read by position."""
        ...


# The rows a batch still holds when it commits, handed to ``Writer.commit``: its events, its
# stream heads and its command rows, in that order. A plain tuple, built at every commit.
Buffered = tuple[Sequence[EventRow], Sequence[HeadRow], Sequence[CommandRow]]
NOTHING_BUFFERED: Buffered = ((), (), ())


class Writer(Protocol):
    """One process's writer: used by the group-commit leader only, one batch at a time."""

    @property
    def capabilities(self) -> WriterCapabilities:
        """What this writer does beyond the minimum (``WriterCapabilities()``: nothing)."""
        ...

    @property
    def cursor(self) -> Any:
        """The cursor projections and domain views run SQL on inside the transaction."""
        ...

    def begin(self) -> bool:
        """Open the write transaction, waiting for writers in other processes.

        Returns True when no other writer has committed since this writer's last commit, so
        what the log cached about its tail, its stream heads and its projection checkpoints
        is still true.
        """
        ...

    def commit(self, buffered: Buffered = NOTHING_BUFFERED) -> None:
        """Write the rows the batch still holds (``buffered``, as ``insert_events``,
        ``upsert_heads`` and ``insert_commands`` would) and make the transaction durable (to the
        configured sync level). One call, so that a writer whose statements wait for a server
        can send them with the commit and wait once."""
        ...

    def rollback(self) -> None:
        """Abandon the transaction, if one is open."""
        ...

    def savepoint(self) -> None:
        """Open the nested scope one caller's SQL runs in, inside a shared batch."""
        ...

    def release_savepoint(self) -> None: ...

    def rollback_to_savepoint(self) -> None:
        """Undo the caller's SQL since ``savepoint`` (the scope stays to be released)."""
        ...

    def tail(self) -> tuple[int, bytes, int]:
        """``(position, hash, epoch)`` of the last event, or ``(0, GENESIS, 0)``."""
        ...

    def stream_head(self, stream_id: str) -> tuple[int, str] | None:
        """``(version, state)`` of a stream as of this transaction, None if it does not exist."""
        ...

    def stream_heads(self, stream_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """``stream_head`` of many streams (absent: not in the result). Asked only of a writer
        that ``reads_heads_at_once``."""
        ...

    def collided(self, ex: BaseException) -> bool:
        """Whether ``ex`` is a row refused as a duplicate key. Asked only of a writer that
        ``reads_heads_at_once``, after a batch that took streams as new failed."""
        ...

    def command_outcome(self, command_id: str) -> CommandOutcome | None: ...

    def insert_events(self, rows: Sequence[EventRow]) -> None: ...

    def upsert_heads(self, rows: Sequence[HeadRow]) -> None:
        """Write stream heads to the ``streams`` table, keeping first position and creation
        time of a stream that exists."""
        ...

    def insert_commands(self, rows: Sequence[CommandRow]) -> None: ...

    def rows_after(
        self, position: int, event_types: frozenset[str] | None = None
    ) -> Iterator[EventRow]:
        """Event rows after ``position`` as this transaction sees them, in position order;
        only of ``event_types`` when given."""
        ...


class Storage(Protocol):
    """One log's database: connections, reads outside the write transaction, opening."""

    path: str
    readonly: bool

    def writer(self) -> Writer:
        """This process's writer (made on first use, never shared across fork)."""
        ...

    def connection(self) -> Any:
        """This thread's read connection (DB-API style; SQL reads by adapters and tests)."""
        ...

    def translate(self, ex: BaseException) -> BaseException:
        """A backend error as an ``EngineError``; any other exception unchanged."""
        ...

    def rows_after(self, after_position: int, limit: int | None = None) -> Iterator[EventRow]: ...

    def stream_rows(self, stream_id: str, after_version: int) -> list[EventRow]: ...

    def hash_at(self, position: int) -> bytes | None: ...

    def max_position(self) -> int: ...

    def stream_head(self, stream_id: str) -> tuple[int, str] | None: ...

    def data_version(self) -> int:
        """A number that changes when another connection commits (cheap, for polling)."""
        ...

    def content_cursor(self) -> AbstractContextManager[Any]:
        """A cursor over one consistent read snapshot, for a ``with`` block."""
        ...

    def wakeups(self) -> Wakeups | None:
        """This backend's own news of other processes' commits; None: poll ``data_version``."""
        ...

    def lost(self) -> str | None:
        """Why the log can no longer be written here (its file deleted or replaced under this
        process), None while it can. Cheap: asked before requests and by long waits."""
        ...

    def migrate(self, recorded_at: str) -> int: ...

    def check_current(self, wanted: dict[str, int], oldest: int | None = None) -> int:
        """Refuse (``NotALog``/``NeedsMigration``) a read-only log that is not current: its
        schema not from ``oldest`` (default: the latest) to the latest, or a projection of
        ``wanted`` at another version. Returns the schema."""
        ...

    def close(self) -> None: ...


def translated(storage: Storage, ex: BaseException) -> BaseException:
    """``storage.translate`` as a function, so callers do not repeat the isinstance test."""
    return ex if isinstance(ex, EngineError) else storage.translate(ex)
