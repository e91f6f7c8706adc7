"""The audit commands on real files: every tampering is caught, diffs say where logs part."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import apsw
import pytest

from engine import FixedClock, chain
from engine.audit import diff
from engine.domain import commands as c
from engine.domain.rules import Settings
from projections import open_engine
from tests.support.cli import foldline


def make_log(path: Path, sessions: int = 3, clock: FixedClock | None = None) -> None:
    """A small, realistic log: sessions, jobs started and finished, a task."""
    engine = open_engine(path, Settings(), clock=clock or FixedClock())
    for i in range(sessions):
        engine.handle(c.CreateSession(session_id=f"s{i}", start_run_id=f"r{i}"))
        engine.handle(c.AcceptJob(job_id=f"j{i}", session_id=f"s{i}", prompt=f"p{i}"))
        engine.handle(c.StartJob(job_id=f"j{i}", run_id=f"run{i}"))
        engine.handle(c.FinishJob(job_id=f"j{i}", outcome="ok", result=f"done {i}"))
    engine.handle(c.CreateTask(task_id="t0", session_id="s0"))
    engine.log.close()


def tamper(path: Path, *statements: str) -> None:
    conn = apsw.Connection(str(path))
    for trigger in ("events_refuse_update", "events_refuse_delete"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for sql in statements:
        conn.execute(sql)
    conn.close()


def verdict(path: Path) -> tuple[int, set[str]]:
    done = foldline("verify", str(path))
    kinds = {v["kind"] for v in json.loads(done.stdout)["violations"]} if done.stdout else set()
    return done.returncode, kinds


def test_audit_verify_passes_a_clean_log_and_leaves_it_untouched(clean: Path) -> None:
    before = clean.read_bytes()
    assert verdict(clean) == (0, set())
    assert clean.read_bytes() == before


def forge_chain(path: Path, *statements: str, through: int = 1 << 62) -> None:
    """Edit rows, then rewrite every hash so that the chain is self-consistent again (up to
    position ``through``: a forger who stops there leaves the link after it broken)."""
    tamper(path, *statements)
    conn = apsw.Connection(str(path))
    previous = chain.GENESIS
    rows = conn.execute("SELECT * FROM events WHERE position <= ? ORDER BY position", (through,))
    for row in rows.fetchall():
        digest = chain.link(previous, *row[:9])
        conn.execute("UPDATE events SET hash = ? WHERE position = ?", (digest, row[0]))
        previous = digest
    conn.close()


FORGED_FINISH = (
    'UPDATE events SET state = \'error\', payload = CAST(\'{"type":"job.finished",'
    '"outcome":"maybe"}\' AS BLOB) WHERE position = 13'
)
EDITED_RESULT = (
    'UPDATE events SET payload = CAST(\'{"type":"job.finished","outcome":"ok",'
    '"result":"forged"}\' AS BLOB) WHERE position = 13'
)

# tampering -> (statements, rewrite the chain after?, what verify reports, what diff shows
# comparing the clean log (A) with the tampered one (B), and which side's chain breaks)
TAMPERING: dict[str, tuple[list[str], bool, str, dict[str, Any]]] = {
    "edited-payload": (
        [EDITED_RESULT],
        False,
        "hash_mismatch",
        {"common_prefix": 12, "changed": {"job:j1": [3]}, "broken": "b"},
    ),
    "edited-state": (
        ["UPDATE events SET state = 'error' WHERE position = 13"],
        False,
        "state_mismatch",
        {"common_prefix": 12, "changed": {"job:j1": [3]}, "broken": "b"},
    ),
    "deleted-row": (
        ["DELETE FROM events WHERE position = 5"],
        False,
        "position_gap",
        {"common_prefix": 4, "only_a": {"job:j0": [2]}, "broken": "b"},
    ),
    "inserted-row": (
        [
            "INSERT INTO events SELECT position + 100, stream_id, version + 100, event_type,"
            " recorded_at, epoch, command_id, state, payload, hash FROM events"
            " WHERE position = 3"
        ],
        False,
        "position_gap",
        {"common_prefix": 23, "only_b": {"session:s0": [103]}, "broken": "b"},
    ),
    "swapped-rows": (
        [
            "UPDATE events SET position = -4 WHERE position = 4",
            "UPDATE events SET position = 4 WHERE position = 5",
            "UPDATE events SET position = 5 WHERE position = -4",
        ],
        False,
        "hash_mismatch",
        {"common_prefix": 3, "moved": {"job:j0": [1, 2]}, "broken": "b"},
    ),
    "row-before-the-first": (
        [
            "INSERT INTO events SELECT 0, stream_id, version + 100, event_type, recorded_at,"
            " epoch, command_id, state, payload, hash FROM events WHERE position = 1"
        ],
        False,
        "position_gap",
        {"common_prefix": -1, "only_b": {"session:s0": [101]}, "broken": "b"},
    ),
    "truncated-tail": (
        ["DELETE FROM events WHERE position > (SELECT max(position) - 3 FROM events)"],
        False,
        "projection_mismatch",
        {"common_prefix": 20, "only_a": {"session:s0": [5], "session:s2": [4], "task:t0": [1]}},
    ),
    "forged-chain": (
        [FORGED_FINISH],
        True,
        "illegal_transition",
        {"common_prefix": 12, "changed": {"job:j1": [3]}},
    ),
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_audit_verify_and_diff_both_catch_every_tampering(
    clean: Path, tmp_path: Path, case: str
) -> None:
    statements, forged, expected, shown = TAMPERING[case]
    tampered = tmp_path / "tampered.db"
    shutil.copy(clean, tampered)
    (forge_chain if forged else tamper)(tampered, *statements)
    code, kinds = verdict(tampered)
    assert code == 1 and expected in kinds, kinds
    assert not forged or "hash_mismatch" not in kinds  # the forged chain itself verifies
    code, report = _diff(clean, tampered)
    assert code == 1 and not report["identical"]
    assert report["common_prefix"] == shown["common_prefix"]
    for key in ("changed", "only_a", "only_b", "moved"):
        assert report[key] == shown.get(key, {}), (key, report[key])
    broken = shown.get("broken")
    assert [side for side, found in report["chain"].items() if found] == (
        [broken] if broken else []
    )
    code, reverse = _diff(tampered, clean)  # the same story told from the other side
    assert code == 1 and reverse["common_prefix"] == shown["common_prefix"]
    assert (reverse["only_a"], reverse["only_b"]) == (report["only_b"], report["only_a"])
    assert (reverse["changed"], reverse["moved"]) == (report["changed"], report["moved"])
    assert (reverse["chain"]["a"], reverse["chain"]["b"]) == (report["chain"]["b"], [])
    human = foldline("diff", str(clean), str(tampered)).stdout
    assert f"part after position {shown['common_prefix']}" in human
    if broken:
        assert f"{broken.upper()}'s chain does not verify" in human


def test_audit_verify_detects_an_edited_projection(clean: Path) -> None:
    tamper(clean, "UPDATE jobs SET state = 'error' WHERE job_id = 'j1'")
    assert verdict(clean) == (1, {"projection_mismatch"})


def test_audit_verify_refuses_what_is_not_a_log(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    done = foldline("verify", str(junk))
    assert done.returncode == 2 and "not_a_log" in done.stderr
    assert foldline("verify", str(tmp_path / "missing.db")).returncode == 2


def _diff(a: Path, b: Path) -> tuple[int, dict[str, Any]]:
    done = foldline("diff", str(a), str(b), "--json")
    return done.returncode, json.loads(done.stdout)


def test_audit_diff_of_identical_logs(clean: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"
    shutil.copy(clean, copy)
    code, report = _diff(clean, copy)
    assert code == 0 and report["identical"]
    assert foldline("diff", str(clean), str(copy)).stdout.startswith("identical")


def test_audit_diff_finds_where_two_histories_part(tmp_path: Path) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    make_log(a, sessions=2)
    shutil.copy(a, b)
    engine_a = open_engine(a, clock=FixedClock())
    engine_a.handle(c.AcceptJob(job_id="only-a", session_id="s1"))
    engine_a.log.close()
    engine_b = open_engine(b, clock=FixedClock())
    engine_b.handle(c.CancelSession(session_id="s1"))
    engine_b.log.close()
    code, report = _diff(a, b)
    assert code == 1 and report["common_prefix"] == 16  # 2 sessions x 7 events, owes, task
    assert "job:only-a" in report["only_a"]
    assert report["changed"]["session:s1"] == [5]
    assert report["entities"]["session:s1"]["a"]["state"] == "running"
    assert report["entities"]["session:s1"]["b"]["state"] == "cancelled"
    human = foldline("diff", str(a), str(b)).stdout
    assert "part after position 16" in human and "only in A: job:only-a" in human
    at_fork = _diff_at(a, b, 16)
    assert at_fork["entities"] == {}


def test_audit_diff_sees_rows_only_in_b_when_both_logs_hold_as_many(tmp_path: Path) -> None:
    # A and B each go on with a stream of their own: as many rows after the fork on both
    # sides, so B's own row must still be looked for, not inferred away from the counts.
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    make_log(a, sessions=2)
    shutil.copy(a, b)
    for path, job in ((a, "only-a"), (b, "only-b")):
        engine = open_engine(path, clock=FixedClock())
        engine.handle(c.AcceptJob(job_id=job, session_id="s1"))
        engine.log.close()
    found = diff(a, b)
    assert found.heads["a"] == found.heads["b"]
    assert found.only_a == {"job:only-a": [1]} and found.only_b == {"job:only-b": [1]}


def test_audit_diff_and_verify_of_an_empty_log(clean: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    open_engine(empty).log.close()
    assert verdict(empty) == (0, set())
    code, same = _diff(empty, empty)
    assert code == 0 and same["identical"]
    code, report = _diff(empty, clean)
    assert code == 1 and report["common_prefix"] == 0 and report["heads"] == {"a": 0, "b": 23}
    assert sum(len(v) for v in report["only_b"].values()) == 23 and not report["only_a"]
    assert report["entities"]["task:t0"]["a"] is None
    assert report["entities"]["task:t0"]["b"]["state"] == "submitted"
    refused = foldline("checkpoint", str(empty))
    assert refused.returncode == 2 and "nothing to anchor" in refused.stderr


def _diff_at(a: Path, b: Path, position: int) -> dict[str, Any]:
    return json.loads(foldline("diff", str(a), str(b), "--json", "--at", str(position)).stdout)


def test_audit_state_history_export_tail(clean: Path) -> None:
    state = json.loads(foldline("state", str(clean), "--at", "5").stdout)
    assert state["job:j0"]["state"] == "running" and "job:j1" not in state
    time = json.loads(foldline("state", str(clean), "--time", "2026-01-01T00:00:00Z").stdout)
    assert time["task:t0"]["state"] == "submitted"
    history = foldline("history", str(clean), "job:j2").stdout.splitlines()
    assert [json.loads(line)["event_type"] for line in history] == [
        "job.accepted",
        "job.started",
        "job.finished",
    ]
    export = foldline("export", str(clean)).stdout
    assert export == foldline("export", str(clean)).stdout  # byte-stable
    first = json.loads(export.splitlines()[0])
    assert list(first) == sorted(first) and first["position"] == 1 and len(first["hash"]) == 64
    part = foldline("export", str(clean), "--from", "3", "--to", "4").stdout.splitlines()
    assert [json.loads(line)["position"] for line in part] == [3, 4]
    tail = foldline("tail", str(clean), "--lines", "2").stdout.splitlines()
    assert len(tail) == 2


def test_audit_rebuild_refolds_and_reports(clean: Path) -> None:
    tamper(clean, "UPDATE jobs SET state = 'error' WHERE job_id = 'j1'")
    report = json.loads(foldline("rebuild", str(clean)).stdout)
    assert "jobs" in report["changed"]
    assert verdict(clean) == (0, set())
