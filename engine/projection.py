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
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar

from engine.errors import InvalidDeclaration
from engine.events import RecordedEvent

EventSource = Callable[[int], Iterator[RecordedEvent]]
"""Yields recorded events after a position, in position order."""


class Projection:
    """Base of a read model. Subclasses set the class attributes and implement ``apply``."""

    name: ClassVar[str]
    version: ClassVar[int]
    tables: ClassVar[tuple[str, ...]]
    ddl: ClassVar[str]

    def apply(self, cursor: Any, event: RecordedEvent) -> None:
        """Fold one event into the tables. Pure SQL on ``cursor``: no other IO, no clock."""
        raise NotImplementedError

    def fold(self, cursor: Any, events: Iterable[RecordedEvent]) -> None:
        """Fold many events (rebuilds, catch-up). Override for a faster bulk path; the result
        must be the same as calling ``apply`` for each event."""
        for event in events:
            self.apply(cursor, event)


class ProjectionSet:
    """The projections one log keeps, and their checkpoints."""

    def __init__(self, projections: Sequence[Projection]) -> None:
        names = [p.name for p in projections]
        if len(set(names)) != len(names):
            raise InvalidDeclaration(f"projection names must be unique: {names}")
        self.projections = tuple(projections)
        marks = ", ".join("?" for _ in names)
        self._mark_sql = f"UPDATE projections SET checkpoint = ? WHERE name IN ({marks})"
        self._names = tuple(names)

    def install(self, cursor: Any, head: int, events_after: EventSource) -> list[str]:
        """Create missing projections, rebuild those whose version changed, catch up the rest.

        Runs inside the caller's write transaction. Returns the names that were rebuilt.
        """
        rebuilt = []
        for projection in self.projections:
            row = cursor.execute(
                "SELECT version, checkpoint FROM projections WHERE name = ?", (projection.name,)
            ).fetchall()
            if not row or row[0][0] != projection.version:
                self._refold(cursor, projection, events_after)
                rebuilt.append(projection.name)
            elif row[0][1] < head:
                projection.fold(cursor, events_after(row[0][1]))
            cursor.execute(
                "INSERT INTO projections VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE"
                " SET version = excluded.version, checkpoint = excluded.checkpoint",
                (projection.name, projection.version, head),
            )
        return rebuilt

    def apply(self, cursor: Any, events: Iterable[RecordedEvent]) -> None:
        """Fold freshly appended events into every projection (inside the append transaction)."""
        for event in events:
            for projection in self.projections:
                projection.apply(cursor, event)

    def mark(self, cursor: Any, position: int) -> None:
        """Record that every projection has applied the log up to ``position``."""
        if self._names:
            cursor.execute(self._mark_sql, (position, *self._names))

    def rebuild(self, cursor: Any, head: int, events_after: EventSource) -> None:
        """Drop and refold every projection from the whole log (inside a write transaction)."""
        for projection in self.projections:
            self._refold(cursor, projection, events_after)
        self.mark(cursor, head)

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
    def _refold(cursor: Any, projection: Projection, events_after: EventSource) -> None:
        for table in projection.tables:
            cursor.execute(f"DROP TABLE IF EXISTS {table}")
        cursor.execute(projection.ddl)
        projection.fold(cursor, events_after(0))
