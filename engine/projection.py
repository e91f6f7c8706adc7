"""Projections: read models folded from the log inside the append transaction.

A projection has a ``name``, a ``version``, its ``ddl`` and the ``tables`` it owns, and an
``apply`` that folds one recorded event into them. The log calls ``apply`` in the same
transaction as the append, so a reader never sees a log and projections that disagree. Each
projection's ``checkpoint`` (last applied position) is stored in the ``projections`` table.

At open, a projection whose stored version differs from its code is dropped and refolded from
the whole log; one that is behind (added later, or written by a process without it) catches up.
``rebuild`` refolds everything; its result must equal the incrementally kept tables, which
``content_hash`` lets a test (or an auditor) check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from engine.errors import InvalidDeclaration, NeedsMigration
from engine.events import Event, RecordedEvent, event_type_of
from engine.machines import Machines


class EventSource(Protocol):
    """Yields recorded events after a position, in position order; given ``event_types``,
    only events of those types (the storage skips the rest without decoding them)."""

    def __call__(
        self, position: int, event_types: frozenset[str] | None = None
    ) -> Iterator[RecordedEvent]: ...


@dataclass(frozen=True)
class Folder:
    feed: Callable[[RecordedEvent], None]
    finish: Callable[[], None]
    # The event types ``feed`` wants; None: all of them. Lets a rebuild skip the rest.
    event_types: frozenset[str] | None = None
    # A memory fold may keep its rows itself: table -> {primary key (a tuple for several
    # columns) -> row in the table's column order}. The audit then compares them with the
    # stored tables as they are, and does not call ``finish`` to write them anywhere.
    rows: Callable[[], Mapping[str, Mapping[Any, Sequence[Any]]]] | None = None
    # What ``feed`` does, by event type, given the event and the id part of its stream id
    # (``o7`` of ``order:o7``): the audit calls these straight, one call per fold and event.
    routes: Mapping[str, Callable[[RecordedEvent, str], None]] | None = None


class Projection:
    """Base of a read model. Subclasses set the class attributes and implement ``apply``."""

    name: ClassVar[str]
    version: ClassVar[int]
    tables: ClassVar[tuple[str, ...]]
    ddl: ClassVar[str]
    # True when every row is folded only from the events of streams whose id part is the
    # row's id (``o7`` from ``order:o7`` and ``invoice:o7``): the audit may then refold it by
    # shares of the streams and compare share by share. Otherwise it compares the tables with
    # a refold in one piece only (a share alone could miss what another share's events do).
    folds_by_entity: ClassVar[bool] = False

    def apply(self, cursor: Any, event: RecordedEvent) -> None:
        """Fold one event into the tables. Pure SQL on ``cursor``: no other IO, no clock."""
        raise NotImplementedError

    def folder(self, cursor: Any) -> Folder:
        """A bulk fold for rebuilds and catch-up: ``feed`` each event in order, then ``finish``.
        Override for a faster path (fold in memory, write once); the resulting rows must be
        the same as calling ``apply`` for each event."""
        return Folder(lambda event: self.apply(cursor, event), lambda: None)

    def memory_folder(self, cursor: Any) -> Folder:
        """A fold into empty tables that nothing reads before ``finish`` (the audit's refold
        into a scratch database): override to fold in memory and write each row once, instead
        of one statement per event (or keep the rows and hand them over as ``Folder.rows``).
        Its rows must be the same as ``apply`` after each event in turn; the audit folds again
        through ``folder`` before it reports a disagreement, so a mistake here costs time,
        never a wrong finding. Default: ``folder``."""
        return self.folder(cursor)

    def handled_events(self) -> dict[str, type[Event]] | None:
        """The event classes this projection folds, by type; None: it sees every event (like
        ``streams``). Checked at open against the log's machines."""
        return None

    def fold(self, cursor: Any, events: Iterable[RecordedEvent]) -> None:
        """Fold many events through ``folder``."""
        folder = self.folder(cursor)
        for event in events:
            folder.feed(event)
        folder.finish()


Handler = Callable[[Any, Any, RecordedEvent], None]
"""An unbound fold method: ``(self, cursor, event)``."""

_REGISTERED = "__foldline_handles__"


def handles(*event_classes: type[Event]) -> Callable[[Handler], Handler]:
    """Register a ``DispatchProjection`` method as the fold of these event classes.

    Keyed by class, not by name: a misspelt event is a ``NameError`` at import, and an event
    no machine of the log declares is an ``InvalidDeclaration`` at open.
    """
    if not event_classes:
        raise InvalidDeclaration("@handles needs at least one event class")
    for cls in event_classes:
        event_type_of(cls)  # an event class with a dotted tag, or InvalidDeclaration

    def register(method: Handler) -> Handler:
        setattr(method, _REGISTERED, (*getattr(method, _REGISTERED, ()), *event_classes))
        return method

    return register


class DispatchProjection(Projection):
    """A projection whose ``apply`` calls the method registered with ``@handles`` for the
    event's class, and ignores every other event.

    The table is built when the subclass is defined: two methods for one event class, or a
    method named ``on_...`` without ``@handles`` (the old naming convention, which nothing reads
    any more), are refused there.
    """

    handlers: ClassVar[dict[type[Event], str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own: dict[type[Event], str] = {}
        for name, member in vars(cls).items():
            for event_class in getattr(member, _REGISTERED, ()):
                if own.setdefault(event_class, name) != name:
                    raise InvalidDeclaration(
                        f"{cls.__name__}: {event_type_of(event_class)} is handled by both "
                        f"{own[event_class]} and {name}"
                    )
            if name.startswith("on_") and callable(member) and not hasattr(member, _REGISTERED):
                raise InvalidDeclaration(
                    f"{cls.__name__}.{name} is not registered: decorate it with @handles"
                )
        table = {**cls.handlers, **own}  # a subclass may re-register what its base handles
        cls.handlers = table

    def __init__(self) -> None:
        self._handlers: dict[str, Callable[[Any, RecordedEvent], None]] = {
            event_type_of(event_class): getattr(self, name)
            for event_class, name in self.handlers.items()
        }

    def handled_events(self) -> dict[str, type[Event]] | None:
        return {event_type_of(event_class): event_class for event_class in self.handlers}

    def apply(self, cursor: Any, event: RecordedEvent) -> None:
        handler = self._handlers.get(event.event_type)
        if handler is not None:
            handler(cursor, event)

    def folder(self, cursor: Any) -> Folder:
        handlers = self._handlers

        def feed(event: RecordedEvent) -> None:
            handler = handlers.get(event.event_type)
            if handler is not None:
                handler(cursor, event)

        return Folder(feed, lambda: None, frozenset(handlers))


class ProjectionSet:
    """The projections one log keeps, and their checkpoints.

    A checkpoint of NULL means "applied up to the head": every writer that keeps a projection
    applies it in its own append transactions, so no checkpoint is written on the hot path. A
    writer that does *not* keep a registered projection (a process opened with fewer read
    models) sets that projection's checkpoint to the position before its first append; the
    next process that keeps it catches it up, inside its transaction, before applying more.
    """

    def __init__(self, projections: Sequence[Projection], machines: Machines | None = None) -> None:
        """Raises ``InvalidDeclaration`` for two projections with one name, or (given the
        log's ``machines``) a handler for an event type no machine declares."""
        names = [p.name for p in projections]
        if len(set(names)) != len(names):
            raise InvalidDeclaration(f"projection names must be unique: {names}")
        self.projections = tuple(projections)
        self.names = frozenset(names)
        if machines is not None:
            self.check(machines)

    def check(self, machines: Machines) -> None:
        """Every event a projection handles is one a machine declares, with the same class."""
        problems = []
        for projection in self.projections:
            for event_type, cls in (projection.handled_events() or {}).items():
                declared = machines.event_classes.get(event_type)
                if declared is None:
                    problems.append(
                        f"{projection.name} handles {event_type}, which no machine declares"
                    )
                elif declared is not cls:
                    problems.append(
                        f"{projection.name} handles {event_type} as {cls.__qualname__}, but "
                        f"the machines declare {declared.__qualname__}"
                    )
        if problems:
            raise InvalidDeclaration("; ".join(problems))

    def install(self, cursor: Any, events_after: EventSource) -> list[str]:
        """Create missing projections and rebuild those whose version changed (inside the
        caller's write transaction). Returns the names that were (re)built from scratch."""
        rebuilt = []
        for projection in self.projections:
            row = cursor.execute(
                "SELECT version FROM projections WHERE name = ?", (projection.name,)
            ).fetchall()
            if not row or row[0][0] != projection.version:
                rebuilt.append(projection.name)
        self._refold(cursor, [p for p in self.projections if p.name in rebuilt], events_after)
        self.prepare(cursor, events_after)
        return rebuilt

    def prepare(self, cursor: Any, events_after: EventSource) -> dict[str, int | None]:
        """At the start of a write transaction: catch up any of ours that lag.

        Returns the registered checkpoints (name -> position, or None when current), which
        ``fence_lagging`` needs at the end of the transaction.
        """
        rows = cursor.execute("SELECT name, version, checkpoint FROM projections").fetchall()
        registered: dict[str, int | None] = {name: checkpoint for name, _, checkpoint in rows}
        versions = {name: version for name, version, _ in rows}
        for projection in self.projections:
            checkpoint = registered.get(projection.name)
            # A changed version is install()'s to rebuild; folding into its old tables could fail.
            if checkpoint is not None and versions.get(projection.name) == projection.version:
                projection.fold(cursor, events_after(checkpoint))
                cursor.execute(
                    "UPDATE projections SET checkpoint = NULL WHERE name = ?", (projection.name,)
                )
                registered[projection.name] = None
        return registered

    def apply(self, cursor: Any, events: Iterable[RecordedEvent]) -> None:
        """Fold freshly appended events into every projection (inside the append transaction)."""
        for event in events:
            for projection in self.projections:
                projection.apply(cursor, event)

    def fence_lagging(
        self, cursor: Any, registered: dict[str, int | None], before_position: int
    ) -> None:
        """After appending without some registered projections: mark where they stopped."""
        for name, checkpoint in registered.items():
            if checkpoint is None and name not in self.names:
                cursor.execute(
                    "UPDATE projections SET checkpoint = ? WHERE name = ?", (before_position, name)
                )

    def rebuild(self, cursor: Any, events_after: EventSource) -> None:
        """Drop and refold every projection from the whole log (inside a write transaction),
        reading and decoding the log once for all of them."""
        self._refold(cursor, self.projections, events_after)

    def content_hash(self, cursor: Any) -> dict[str, str]:
        """A sha256 per projection over its tables' rows in a stable order."""
        hashes = {}
        for projection in self.projections:
            digest = hashlib.sha256()
            for table in projection.tables:
                width = len(cursor.execute(f"PRAGMA table_info({table})").fetchall())
                order = ", ".join(str(i + 1) for i in range(width))
                digest.update(table.encode() + b"\0")
                for row in cursor.execute(f"SELECT * FROM {table} ORDER BY {order}"):
                    digest.update(repr(row).encode() + b"\n")
            hashes[projection.name] = digest.hexdigest()
        return hashes

    @staticmethod
    def _refold(cursor: Any, projections: Sequence[Projection], events_after: EventSource) -> None:
        if not projections:
            return
        # A log whose first events were archived (``engine.keep.archive``) cannot be refolded
        # from what it holds: the fold would silently lose every entity made before the cut.
        first = cursor.execute("SELECT min(position) FROM events").fetchall()[0][0]
        if first is not None and first > 1:
            raise NeedsMigration(
                f"the events before position {first} are archived: read models cannot be"
                " refolded from the live log; write it whole first (foldline archive LOG"
                " --join WHOLE.db)"
            )
        for projection in projections:
            for table in projection.tables:
                cursor.execute(f"DROP TABLE IF EXISTS {table}")
            cursor.execute(projection.ddl)
        folders = [projection.folder(cursor) for projection in projections]
        routes: dict[str, list[Callable[[RecordedEvent], None]]] = {}
        wanted: frozenset[str] | None = frozenset()
        for folder in folders:
            types = folder.event_types
            wanted = None if wanted is None or types is None else wanted | types
        for event in events_after(0, wanted):
            feeds = routes.get(event.event_type)
            if feeds is None:
                feeds = routes[event.event_type] = [
                    f.feed
                    for f in folders
                    if f.event_types is None or event.event_type in f.event_types
                ]
            for feed in feeds:
                feed(event)
        for folder, projection in zip(folders, projections, strict=True):
            folder.finish()
            cursor.execute(
                "INSERT INTO projections VALUES (?, ?, NULL) ON CONFLICT (name) DO UPDATE"
                " SET version = excluded.version, checkpoint = NULL",
                (projection.name, projection.version),
            )
