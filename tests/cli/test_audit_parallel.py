"""verify split over processes finds exactly what one process finds, and a read model that
folds across streams (which a split by stream cannot refold) is still verified correctly."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from engine import FixedClock, RecordedEvent
from engine.audit import verifier, verify
from engine.domain import MACHINES
from engine.projection import Projection
from projections import default_projections, open_engine
from tests.cli.test_audit import TAMPERING, forge_chain, make_log, tamper


class EventCounts(Projection):
    """One row per event type, counting across every stream."""

    name = "event_counts"
    version = 1
    tables = ("event_counts",)
    ddl = "CREATE TABLE event_counts (event_type TEXT PRIMARY KEY, seen INTEGER NOT NULL)"

    def apply(self, cursor: Any, event: RecordedEvent) -> None:
        cursor.execute(
            "INSERT INTO event_counts VALUES (?, 1)"
            " ON CONFLICT (event_type) DO UPDATE SET seen = seen + 1",
            (event.event_type,),
        )


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_audit_parallel_verify_equals_one_process(clean: Path, tmp_path: Path, case: str) -> None:
    statements, forged, _, _ = TAMPERING[case]
    tampered = tmp_path / "tampered.db"
    shutil.copy(clean, tampered)
    (forge_chain if forged else tamper)(tampered, *statements)
    alone = verify(tampered, MACHINES, default_projections(), workers=1)
    split = verify(tampered, MACHINES, default_projections(), workers=3)
    assert split.violations == alone.violations and alone.violations


def test_audit_parallel_verify_of_a_projection_across_streams(tmp_path: Path) -> None:
    db = tmp_path / "counted.db"
    engine = open_engine(db, clock=FixedClock(), extra_projections=(EventCounts(),))
    engine.log.close()
    make_log(db)  # reopened without EventCounts: it lags, and catches up below
    engine = open_engine(db, clock=FixedClock(), extra_projections=(EventCounts(),))
    engine.log.close()
    declared = [*default_projections(), EventCounts()]
    assert verify(db, MACHINES, declared, workers=2).ok
    tamper(db, "UPDATE event_counts SET seen = seen + 1 WHERE event_type = 'job.started'")
    report = verify(db, MACHINES, declared, workers=2)
    assert [(v.kind, v.detail) for v in report.violations] == [
        ("projection_mismatch", "projection event_counts differs from a fold")
    ]


@pytest.mark.parametrize("shares", [1, 2, 3])
def test_audit_parallel_fast_pass_proves_a_clean_log_alone(
    clean: Path, monkeypatch: pytest.MonkeyPatch, shares: int
) -> None:
    """On a clean log the fast pass proves everything itself, in one share or split: each
    share's in-memory refold matches its share of the stored rows (the key shares line up
    with the stream shares), so nothing is refolded or chain-checked the exact way."""
    passes: list[bool] = []
    replay_share = verifier._replay_share

    def recorded(*args: Any) -> Any:
        passes.append(args[-1])
        return replay_share(*args)

    monkeypatch.setattr(verifier, "_pool", lambda workers: None)  # every share in this process
    monkeypatch.setattr(verifier, "_replay_share", recorded)
    monkeypatch.setattr(verifier, "_check_chain", None)  # an exact chain check would fail here
    report = verify(clean, MACHINES, default_projections(), workers=shares)
    assert report.ok and report.events == 23
    assert passes == [True] * shares
