"""verify split over processes finds exactly what one process finds, and a read model that
folds across streams (which a split by stream cannot refold) is still verified correctly."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from engine import FixedClock, RecordedEvent
from engine.audit import replay, verifier, verify
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
    replay_share = replay._replay_share

    def recorded(*args: Any) -> Any:
        passes.append(args[-1])
        return replay_share(*args)

    monkeypatch.setattr(verifier, "_pool", lambda workers: None)  # every share in this process
    monkeypatch.setattr(replay, "_replay_share", recorded)
    monkeypatch.setattr(verifier, "_check_chain", None)  # an exact chain check would fail here
    report = verify(clean, MACHINES, default_projections(), workers=shares)
    assert report.ok and report.events == 23
    assert passes == [True] * shares


class SessionJobs(Projection):
    """Jobs per session: a row made by a session's stream, counted up by its jobs' streams,
    which end in other characters (and so fall in other shares of a split verify)."""

    name = "session_jobs"
    version = 1
    tables = ("session_jobs",)
    ddl = "CREATE TABLE session_jobs (session_id TEXT PRIMARY KEY, jobs INTEGER NOT NULL)"

    def apply(self, cursor: Any, event: RecordedEvent) -> None:
        if event.event_type == "session.created":
            cursor.execute("INSERT INTO session_jobs VALUES (?, 0)", (event.stream_id[8:],))
        elif event.event_type == "job.accepted":
            cursor.execute(
                "UPDATE session_jobs SET jobs = jobs + 1 WHERE session_id = ?",
                (event.event.session,),  # type: ignore[attr-defined]
            )


def test_audit_parallel_verify_sees_an_edit_a_split_refold_would_agree_with(
    tmp_path: Path,
) -> None:
    """Each share alone folds the sessions' rows without their jobs' counts (those events are
    in the other share), which is what a forger who zeroes every count leaves: a projection
    not declared to fold by stream is compared only with a refold in one piece."""
    db = tmp_path / "counted.db"
    engine = open_engine(db, clock=FixedClock(), extra_projections=(SessionJobs(),))
    engine.log.close()
    make_log(db)
    engine = open_engine(db, clock=FixedClock(), extra_projections=(SessionJobs(),))
    engine.log.close()
    declared = [*default_projections(), SessionJobs()]
    assert verify(db, MACHINES, declared, workers=2).ok
    tamper(db, "UPDATE session_jobs SET jobs = 0")
    for workers in (1, 2):
        report = verify(db, MACHINES, declared, workers=workers)
        assert [(v.kind, v.detail) for v in report.violations] == [
            ("projection_mismatch", "projection session_jobs differs from a fold")
        ]
