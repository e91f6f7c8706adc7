"""The replay check before an upgrade (``foldline replay``): would new machine code accept a
recorded log, and fold it the same?

The whole history is replayed through the new machines alone, not through the declarations
the log recorded (ADR 0060): ``verify`` with ``by_record=False``. Per machine, the first
position where the new rules refuse an event, cannot read it, or reach another state than the
one recorded; per projection, whether a refold with the new code differs from the stored
tables. Nothing is written to the log.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.audit.source import reading
from engine.audit.verifier import Progress, verify
from engine.chain import Violation
from engine.machines import MachineSpec
from engine.projection import Projection

# What the new rules say of one event: a refusal, a state other than the recorded one, or a
# payload they cannot read (an event type they no longer declare, a shape without upcaster).
RULES = frozenset({"illegal_transition", "state_mismatch", "undecodable", "missing_guard"})
FOLDS = frozenset({"projection_mismatch", "projection_unverifiable"})


@dataclass
class Replayed:
    """What the replay check found; ``ok`` only when nothing would change."""

    events: int
    # kind -> the first event the new rules judge otherwise
    machines: dict[str, dict[str, Any]] = field(default_factory=dict)
    # projection -> why it would differ
    projections: dict[str, str] = field(default_factory=dict)
    # projections not compared (a new version the code rebuilds, say), and why
    unchecked: dict[str, str] = field(default_factory=dict)
    # what is wrong with the log itself, whatever the code (a broken chain, ...)
    log: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.machines or self.projections or self.log)


def replay_check(
    path: str | os.PathLike[str],
    machines: Sequence[MachineSpec],
    projections: Sequence[Projection],
    progress: Progress | None = None,
) -> Replayed:
    """Replay the log at ``path`` through ``machines`` and refold ``projections``.

    Raises:
        NotALog, SchemaTooNew, StorageError: the file cannot be read.
    """
    report = verify(path, machines, projections, progress, by_record=False)
    found = Replayed(report.events, unchecked=dict(report.unchecked))
    rules = [v for v in report.violations if v.kind in RULES]
    rows: dict[int, tuple[str, str, str]] = {}
    if rules:
        with reading(path) as reader:
            for position, stream_id, event_type, state in reader.query(
                "SELECT position, stream_id, event_type, state FROM events"
                " WHERE position IN (SELECT value FROM json_each(?))",
                (str(sorted({v.position for v in rules})),),
            ):
                rows[position] = (stream_id, event_type, state)
    for v in sorted(report.violations, key=lambda v: (v.position, v.kind)):
        if v.kind in RULES and v.position in rows:
            stream_id, event_type, state = rows[v.position]
            found.machines.setdefault(
                stream_id.partition(":")[0],
                {
                    "position": v.position,
                    "stream_id": stream_id,
                    "event_type": event_type,
                    "recorded_state": state,
                    "finding": v.kind,
                    "detail": v.detail,
                },
            )
        elif v.kind == "projection_mismatch":
            found.projections[v.detail.split()[1]] = "a refold with the new code differs"
        elif v.kind == "projection_unverifiable":
            found.projections.setdefault("*", f"not refolded: {v.detail} (position {v.position})")
        elif v.kind == "undeclared_kind":
            kind = v.detail.split("'")[1]
            found.machines.setdefault(
                kind, {"position": v.position, "finding": v.kind, "detail": v.detail}
            )
        else:
            found.log.append(v)
    return found
