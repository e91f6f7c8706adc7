"""Retention: ``foldline retain`` lists (dry run) and retires the rows of jobs that ended long
ago, as recorded events that ``verify`` and ``rebuild`` agree with; the idempotency keys stay
answered, and a query about a retired job says so (410), rather than 404."""

from __future__ import annotations

import json
from pathlib import Path

from engine import FixedClock
from engine.domain import commands as c
from engine.domain import push as p
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
    assert done["positions"]["job"]["last"] - done["positions"]["job"]["first"] == 2
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


def test_retain_refuses_a_run_that_names_no_machine(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    _log(db)
    bad = foldline("retain", str(db), "--dry-run")
    assert bad.returncode == 2 and "--sessions-older-than" in bad.stderr


def _every_kind(path: Path) -> None:
    """In 2026-01: session s0 ended, with an ended job, a completed task and its two settled
    push deliveries; sessions s1 and s2 still open, with an open task and a completed one whose
    push delivery is still owed (so both tasks and the delivery are kept)."""
    engine = open_engine(path, Settings(), clock=FixedClock())
    engine.handle(c.CreateSession(session_id="s0", start_run_id="r0"))
    engine.handle(c.AcceptJob(job_id="j0", session_id="s0", prompt="p", command_id="key-j0"))
    engine.handle(c.StartJob(job_id="j0", run_id="run0"))
    engine.handle(c.FinishJob(job_id="j0", outcome="ok", result="done"))
    engine.handle(c.CreateTask(task_id="t0", session_id="s0", message_id="m0", text="hi"))
    engine.handle(p.SetPushConfig(task_id="t0", config_id="cfg", url="http://127.0.0.1:9/h"))
    engine.handle(c.UpdateTaskStatus(task_id="t0"))
    engine.handle(c.CompleteTask(task_id="t0", result="42"))
    deliveries = engine.log.connection().execute("SELECT delivery_id FROM push_outbox")
    for n, (delivery,) in enumerate(deliveries.fetchall()):
        engine.handle(p.StartPushAttempt(delivery_id=delivery, holder="a"))
        status = 200 if n == 0 else 404  # one delivered, one dead: both settled
        engine.handle(
            p.RecordPushOutcome(delivery_id=delivery, attempt=1, holder="a", status=status)
        )
    engine.handle(c.FinishSession(session_id="s0"))
    engine.handle(c.CreateSession(session_id="s1", start_run_id="r1"))
    engine.handle(c.CreateTask(task_id="t1", session_id="s1", message_id="m1", text="open"))
    engine.handle(c.CreateSession(session_id="s2", start_run_id="r2"))
    engine.handle(c.CreateTask(task_id="t2", session_id="s2", message_id="m2", text="owed"))
    engine.handle(p.SetPushConfig(task_id="t2", config_id="cfg", url="http://127.0.0.1:9/h"))
    engine.handle(c.CompleteTask(task_id="t2", result="43"))  # its delivery still owed
    engine.log.close()


def _ids(db: Path) -> dict[str, list[str]]:
    engine = open_engine(db, Settings())
    try:
        conn = engine.log.connection()
        return {
            table: [r[0] for r in conn.execute(f"SELECT {key} FROM {table} ORDER BY 1")]
            for table, key in (
                ("jobs", "job_id"),
                ("tasks", "task_id"),
                ("push_outbox", "delivery_id"),
                ("sessions", "session_id"),
                ("retired", "kind || ':' || entity_id"),
            )
        }
    finally:
        engine.log.close()


def test_retain_every_machine_kind_by_one_policy_table(tmp_path: Path) -> None:
    """A dry run and a real run for each machine whose rows end: jobs, tasks, push deliveries
    and sessions, each by its own age, with what still needs a row kept."""
    db = tmp_path / "log.db"
    _every_kind(db)
    rows = _ids(db)
    owed = [d for d in rows["push_outbox"] if d.endswith(".t2")]
    pushes = [d for d in rows["push_outbox"] if d not in owed]
    assert (
        len(pushes) == 2
        and len(owed) == 1
        and rows["sessions"] == ["s0", "s1", "s2"]
        and rows["retired"] == []
    )
    ages = [
        *("--jobs-older-than", "30d", "--tasks-older-than", "30d"),
        *("--pushes-older-than", "30d", "--sessions-older-than", "30d"),
    ]
    before = db.read_bytes()
    dry = foldline("retain", str(db), *ages, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    listed = json.loads(dry.stdout)
    assert [j["job_id"] for j in listed["jobs"]] == ["j0"]
    assert [t["task_id"] for t in listed["tasks"]] == ["t0"]  # not t1 (open), t2 (owed)
    assert sorted(d["push_id"] for d in listed["pushes"]) == pushes
    assert [s["session_id"] for s in listed["sessions"]] == ["s0"]  # not s1, s2: still open
    assert sorted(listed["policies"]) == ["job", "push", "session", "task"]
    for line in ("1 jobs", "1 tasks", "2 pushes", "1 sessions"):
        assert f"would retire the rows of {line}" in dry.stderr, dry.stderr
    assert db.read_bytes() == before  # a dry run writes nothing
    real = foldline("retain", str(db), *ages)
    assert real.returncode == 0, real.stderr
    assert sorted(json.loads(real.stdout)["positions"]) == ["job", "push", "session", "task"]
    rows = _ids(db)
    assert rows["jobs"] == [] and rows["tasks"] == ["t1", "t2"] and rows["push_outbox"] == owed
    assert rows["sessions"] == ["s1", "s2"]
    assert rows["retired"] == sorted(
        ["job:j0", "task:t0", "session:s0", *(f"push:{d}" for d in pushes)]
    )
    # Recorded, so verify refolds exactly what the tables hold, and a rebuild keeps it so.
    done = foldline("verify", str(db))
    assert done.returncode == 0, done.stdout
    rebuilt = json.loads(foldline("rebuild", str(db)).stdout)
    assert rebuilt["changed"] == [] and _ids(db) == rows
    again = json.loads(foldline("retain", str(db), *ages).stdout)
    assert [again[k] for k in ("jobs", "tasks", "pushes", "sessions")] == [[], [], [], []]
    # The job's key stays answered: a repeat appends nothing.
    engine = open_engine(db, Settings())
    try:
        repeat = engine.handle(
            c.AcceptJob(job_id="j9", session_id="s1", prompt="p", command_id="key-j0")
        )
        assert repeat.duplicate
    finally:
        engine.log.close()
