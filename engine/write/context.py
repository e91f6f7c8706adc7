"""What a batch of the group commit is given by its log, as one small object.

``engine.write.batch`` (the batch runner) and ``engine.write.transaction`` (one batch's
writes) need a dozen things of the log: its storage, machines, codec, projections, clock, the
epoch it appends under, what its writer knew after the last commit, its counters, and a way to
announce a commit. ``Log`` builds a ``BatchContext`` of exactly those and hands that over
instead of itself, so neither module knows ``engine.log`` (which imports both).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine import chain
from engine.clock import Clock, recorder
from engine.declarations import Declared
from engine.events import EventCodec, RecordedEvent
from engine.machines import Machines, StreamHead
from engine.projection import Projection, ProjectionSet
from engine.storage.seam import Storage
from engine.streams import StreamsProjection


@dataclass
class LogStats:
    """Counters of this process's writes, for metrics. Updated only by the batch leader."""

    commits: int = 0
    events: int = 0
    commit_seconds: float = 0.0
    batch_sizes: dict[int, int] = field(default_factory=dict)  # batch size -> batches


@dataclass
class WriterCache:
    """What this process's writer knew after its last commit; true while ``valid``."""

    valid: bool = False
    tail: tuple[int, bytes, int] = (0, chain.GENESIS, 0)
    heads: dict[str, StreamHead] = field(default_factory=dict)
    # True when every projection of this log is current and every registered one it does not
    # keep is fenced: ``prepare`` and ``fence_lagging`` would find nothing to do.
    settled: bool = False

    def forget(self) -> None:
        self.valid = False
        self.settled = False
        self.heads.clear()


@dataclass
class BatchContext:
    """The parts of one log that its batches use. ``epoch`` is the tenure this process appends
    under (``Log.fence`` sets it); ``announce`` is called with the new head after a commit
    that appended."""

    storage: Storage
    machines: Machines
    codec: EventCodec
    projections: ProjectionSet
    clock: Clock
    announce: Callable[[int], None]
    epoch: int = 0
    cache: WriterCache = field(default_factory=WriterCache)
    stats: LogStats = field(default_factory=LogStats)
    # The code's declarations when this log records them (ADR 0060), and what this process
    # last knew of ``log:declarations``: (its version, the digest its last event names).
    declarations: Declared | None = None
    declared: tuple[int, str | None] | None = None
    # Every projection but the built-in heads, which the transaction writes itself, with
    # the event types each says it folds; and that, by event type, as it is asked.
    _folded: list[tuple[Projection, frozenset[str] | None]] = field(init=False)
    _folding: dict[str, tuple[Projection, ...]] = field(init=False, default_factory=dict)
    # ``recorder(clock)``, made once: the text of an append's ``recorded_at``.
    recorded_now: Callable[[], str] = field(init=False)

    def __post_init__(self) -> None:
        self.recorded_now = recorder(self.clock)
        self._folded = [
            (p, _event_types(p))
            for p in self.projections.projections
            if not isinstance(p, StreamsProjection)
        ]

    def folding(self, event_type: str) -> tuple[Projection, ...]:
        """The projections (besides the heads) that may act on events of ``event_type``."""
        found = self._folding.get(event_type)
        if found is None:
            found = self._folding[event_type] = tuple(
                p for p, types in self._folded if types is None or event_type in types
            )
        return found

    def decode(self, row: Sequence[Any]) -> RecordedEvent:
        """A row read inside the transaction as its recorded event."""
        return self.codec.recorded(row)


class _NoCursor:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("a projection's folder touched its cursor before any event")


def _event_types(projection: Projection) -> frozenset[str] | None:
    """The event types a projection folds, as its bulk folder declares them (None: any).

    ``Projection.folder`` promises the same rows as ``apply`` for every event, and skips the
    types it does not declare, so ``apply`` must leave those alone too: the append path does
    not call it for them. A folder that needs its cursor to be made is asked nothing."""
    try:
        return projection.folder(_NoCursor()).event_types
    except RuntimeError:
        return None
