"""Retention: ``foldline retain`` lists (dry run) and retires the rows of jobs that ended long
ago, as recorded events that ``verify`` and ``rebuild`` agree with; the idempotency keys stay
answered, and a query about a retired job says so (410), rather than 404."""

from __future__ import annotations

import json
from pathlib import Path

from engine import FixedClock
from engine.domain import commands as c
from engine.domain.rules import Settings
from projections import open_engine
from tests.support.cli import foldline


def _log(path: Path) -> None:
    """Three ended jobs (one under a caller's key), one still running, in 2026-01."""
    engine = open_engine(path, Settings(), clock=FixedClock())
    for i in range(3):
        engine.handle(c.CreateSession(session_id=f"s{i}", start_run_id=f"r{i}"))
        engine.handle(
            c.AcceptJob(job_id=f"j{i}", session_id=f"s{i}", prompt=f"p{i}", command_id=f"key-{i}")
        )
        engine.handle(c.StartJob(job_id=f"j{i}", run_id=f"run{i}"))
        engine.handle(c.FinishJob(job_id=f"j{i}", outcome="ok", result=f"done {i}"))
    engine.handle(c.AcceptJob(job_id="live", session_id="s0", prompt="still going"))
    engine.handle(c.StartJob(job_id="live", run_id="run-live"))
    engine.log.close()


def _jobs(db: Path) -> list[str]:
    engine = open_engine(db, Settings())
    try:
        rows = engine.log.connection().execute("SELECT job_id FROM jobs ORDER BY job_id")
        return [r[0] for r in rows.fetchall()]
    finally:
        engine.log.close()


def test_retain_dry_run_lists_and_the_real_run_retires_as_recorded_events(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    _log(db)
    before = db.read_bytes()
    dry = foldline("retain", str(db), "--jobs-older-than", "30d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    listed = json.loads(dry.stdout)
    assert [j["job_id"] for j in listed["jobs"]] == ["j0", "j1", "j2"]  # not the live one
    assert listed["dry_run"] and "positions" not in listed
    assert "would retire the rows of 3 jobs" in dry.stderr
    assert db.read_bytes() == before  # a dry run writes nothing
    real = foldline("retain", str(db), "--jobs-older-than", "30d")
    assert real.returncode == 0, real.stderr
    done = json.loads(real.stdout)
    assert done["positions"]["last"] - done["positions"]["first"] == 2
    assert _jobs(db) == ["live"]
    # Recorded, so verify refolds exactly what the tables hold, and a rebuild keeps it so.
    assert foldline("verify", str(db)).returncode == 0
    assert foldline("rebuild", str(db)).returncode == 0
    assert _jobs(db) == ["live"]
    history = foldline("history", str(db), "retention:j0")
    assert json.loads(history.stdout.splitlines()[0])["event_type"] == "retention.retired"
    again = json.loads(foldline("retain", str(db), "--jobs-older-than", "30d").stdout)
    assert again["jobs"] == []
    # The key that made j0 is still known: a repeat appends nothing and names j0.
    engine = open_engine(db, Settings())
    try:
        repeat = engine.handle(
            c.AcceptJob(job_id="j9", session_id="s0", prompt="p0", command_id="key-0")
        )
        assert repeat.duplicate
    finally:
        engine.log.close()
    assert "j9" not in _jobs(db)


def test_retain_refuses_a_malformed_age(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    _log(db)
    bad = foldline("retain", str(db), "--jobs-older-than", "a month")
    assert bad.returncode == 2 and "30d" in bad.stderr
