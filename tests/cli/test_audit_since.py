"""``foldline verify DB --since CHECKPOINT``: the log must extend a tlog-checkpoint, and only
what came after it is verified. Every tampering case of the audit suite is found when it lies
after the checkpoint; before it, exactly the cases docs/auditing.md names are found."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine import FixedClock, open_log
from engine.domain import commands as c
from engine.domain.rules import Settings
from engine.merkle.nodes import BLOCK, extend_tree
from projections import open_engine
from tests.cli.test_audit import TAMPERING, forge_chain, make_log, tamper
from tests.cli.test_audit_postgres import foldline
from tests.support.postgres import session_cluster
from tests.support.tickets import MACHINES as TICKETS
from tests.support.tickets import TicketNoted, TicketOpened, TicketTitles
from tests.unit.test_tree_nodes import fill

CHECKPOINT_AT = 23  # make_log's 23 events; the tail adds sessions s3..s5


def add_tail(db: str | Path, clock: FixedClock | None = None) -> None:
    """Three more sessions, each with a finished job, and a job on the older session s1."""
    engine = open_engine(db, Settings(), clock=clock or FixedClock())
    for i in range(3, 6):
        engine.handle(c.CreateSession(session_id=f"s{i}", start_run_id=f"r{i}"))
        engine.handle(c.AcceptJob(job_id=f"j{i}", session_id=f"s{i}", prompt=f"p{i}"))
        engine.handle(c.StartJob(job_id=f"j{i}", run_id=f"run{i}"))
        engine.handle(c.FinishJob(job_id=f"j{i}", outcome="ok", result=f"done {i}"))
    engine.handle(c.AcceptJob(job_id="j9", session_id="s1", prompt="late"))
    engine.log.close()


@pytest.fixture
def extended(tmp_path: Path) -> tuple[Path, Path]:
    """A log whose first 23 events a checkpoint commits to, and a tail after it."""
    db, checkpoint = tmp_path / "log.db", tmp_path / "checkpoint.txt"
    make_log(db)
    checkpoint.write_text(ok("checkpoint", str(db), "--origin", "audit.example/log"))
    add_tail(db)
    return db, checkpoint


def ok(*args: str) -> str:
    done = foldline(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def since(db: Path | str, checkpoint: Path, *more: str) -> tuple[int, dict[str, Any], str]:
    done = foldline("verify", str(db), "--since", str(checkpoint), *more)
    return done.returncode, json.loads(done.stdout) if done.stdout else {}, done.stderr


def kinds(report: dict[str, Any]) -> set[str]:
    return {v["kind"] for v in report.get("violations", [])}


def positions(db: Path, stream_id: str) -> list[int]:
    from engine.audit.source import reading

    with reading(db) as reader:
        return [row[0] for row in reader.stream_rows(stream_id)]


def cases(db: Path, job: str, session: str) -> dict[str, tuple[list[str], bool]]:
    """The audit suite's tampering cases (``tests/cli/test_audit.py`` TAMPERING), aimed at
    ``job`` (accepted, started, finished) and ``session``: statements, re-chained after?"""
    accepted, started, finished = positions(db, f"job:{job}")[:3]
    first = positions(db, f"session:{session}")[0]
    edited = TAMPERING["edited-payload"][0][0].replace("position = 13", f"position = {finished}")
    forged = TAMPERING["forged-chain"][0][0].replace("position = 13", f"position = {finished}")
    return {
        "edited-payload": ([edited], False),
        "edited-state": ([f"UPDATE events SET state = 'error' WHERE position = {finished}"], False),
        "deleted-row": ([f"DELETE FROM events WHERE position = {started}"], False),
        "inserted-row": (
            [
                "INSERT INTO events SELECT (SELECT max(position) FROM events) + 100, stream_id,"
                " version + 100, event_type, recorded_at, epoch, command_id, state, payload, hash"
                f" FROM events WHERE position = {first}"
            ],
            False,
        ),
        "swapped-rows": (
            [
                f"UPDATE events SET position = -4 WHERE position = {accepted}",
                f"UPDATE events SET position = {accepted} WHERE position = {started}",
                f"UPDATE events SET position = {started} WHERE position = -4",
            ],
            False,
        ),
        "row-before-the-first": (TAMPERING["row-before-the-first"][0], False),
        "truncated-tail": (
            [f"DELETE FROM events WHERE position > {finished - 1}"],  # the job's finish on
            False,
        ),
        "forged-chain": ([forged], True),
    }


def test_audit_since_covers_every_case_of_the_audit_suite(extended: tuple[Path, Path]) -> None:
    assert set(cases(extended[0], "j4", "s4")) == set(TAMPERING)


def test_audit_since_passes_a_clean_log_and_says_what_it_verified(
    extended: tuple[Path, Path],
) -> None:
    db, checkpoint = extended
    before = db.read_bytes()
    code, report, said = since(db, checkpoint)
    assert code == 0 and report["ok"], said
    assert report["verified"]["first"] == CHECKPOINT_AT + 1
    assert report["verified"]["last"] == report["events"] == 46  # 7 a session, 2 for j9
    assert report["checkpoint"]["signature"].startswith("not checked (no --key)")
    assert f"consistent with checkpoint of {CHECKPOINT_AT} events" in said
    assert f"verified events {CHECKPOINT_AT + 1}..{report['events']}" in said
    assert db.read_bytes() == before
    code, report, _ = since(db, checkpoint.parent / "missing.txt")
    assert code == 2


def test_audit_since_of_a_checkpoint_at_the_head_verifies_nothing_after(tmp_path: Path) -> None:
    db, checkpoint = tmp_path / "log.db", tmp_path / "cp.txt"
    make_log(db)
    checkpoint.write_text(ok("checkpoint", str(db), "--origin", "o"))
    code, report, _ = since(db, checkpoint)
    assert code == 0 and report["verified"] == {"first": 24, "last": 23, "streams": 0}


def test_audit_since_of_an_empty_checkpoint_verifies_the_whole_log(tmp_path: Path) -> None:
    db, checkpoint = tmp_path / "log.db", tmp_path / "cp.txt"
    open_engine(db, Settings(), clock=FixedClock()).log.close()
    checkpoint.write_text(ok("checkpoint", str(db), "--origin", "o"))
    make_log(db)
    code, report, _ = since(db, checkpoint)
    assert code == 0 and report["since"] == 0
    assert report["verified"] == {"first": 1, "last": 23, "streams": report["verified"]["streams"]}
    tamper(db, "UPDATE events SET state = 'error' WHERE position = 1")
    assert kinds(since(db, checkpoint)[1]) >= {"hash_mismatch", "state_mismatch"}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_audit_since_finds_every_tampering_after_the_checkpoint(
    extended: tuple[Path, Path], case: str
) -> None:
    db, checkpoint = extended
    statements, forged = cases(db, "j4", "s4")[case]
    (forge_chain if forged else tamper)(db, *statements)
    assert foldline("verify", str(db)).returncode == 1  # what a full verify says
    code, report, said = since(db, checkpoint)
    assert code == 1, (report, said)
    found = kinds(report)
    if case == "row-before-the-first":  # position 0 lies before every checkpoint
        assert found == {"position_gap"} and not report["checkpoint"]["consistent"]
    else:
        assert report["checkpoint"]["consistent"], report
        assert found, report


# What an edit at or before the checkpoint leads to: the kind of violation found, or None when
# `--since` does not see it (the stored chain hashes there are as the checkpoint committed to,
# and the streams edited are not touched by the tail). The log is too short for stored tree
# nodes, so every stored hash before the checkpoint is rehashed; over stored nodes, see the
# last test of this file.
BEFORE: dict[str, str | None] = {
    "edited-payload": None,
    "edited-state": None,
    "deleted-row": "position_gap",
    "inserted-row": "position_gap",  # past the head: no inserted row lies before a checkpoint
    "swapped-rows": "checkpoint_mismatch",
    "row-before-the-first": "position_gap",
    "truncated-tail": "checkpoint_mismatch",  # cut below the checkpoint
    "forged-chain": "checkpoint_mismatch",
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_audit_since_finds_exactly_the_stated_cases_before_the_checkpoint(
    extended: tuple[Path, Path], case: str
) -> None:
    db, checkpoint = extended
    statements, forged = cases(db, "j1", "s0")[case]
    (forge_chain if forged else tamper)(db, *statements)
    assert foldline("verify", str(db)).returncode == 1  # a full verify finds every one
    code, report, said = since(db, checkpoint)
    expected = BEFORE[case]
    if expected is None:
        assert code == 0 and report["ok"], report
    elif case == "inserted-row":  # its copy of s0's row lands past the head, in the tail
        assert code == 1 and expected in kinds(report) and report["checkpoint"]["consistent"]
    else:
        assert code == 1 and kinds(report) == {expected}, report
        assert not report["checkpoint"]["consistent"]
        assert report["verified"] is None
        assert "nothing after it was verified" in said


def test_audit_since_finds_an_earlier_edit_of_a_stream_the_tail_touches(
    extended: tuple[Path, Path],
) -> None:
    db, checkpoint = extended
    first = positions(db, "session:s1")[0]  # the tail accepts job j9 on session s1
    tamper(db, f"UPDATE events SET state = 'error' WHERE position = {first}")
    code, report, _ = since(db, checkpoint)
    assert code == 1 and report["checkpoint"]["consistent"]
    assert {"hash_mismatch", "state_mismatch"} <= kinds(report)
    assert min(v["position"] for v in report["violations"]) == first <= CHECKPOINT_AT


def test_audit_since_compares_the_read_models_of_the_entities_the_tail_touches(
    extended: tuple[Path, Path], tmp_path: Path
) -> None:
    db, checkpoint = extended
    pristine = tmp_path / "pristine.db"
    shutil.copy(db, pristine)
    untouched = tmp_path / "untouched.db"
    shutil.copy(db, untouched)
    tamper(db, "UPDATE jobs SET result = 'forged' WHERE job_id = 'j4'")
    code, report, _ = since(db, checkpoint)
    assert code == 1 and kinds(report) == {"projection_mismatch"}
    tamper(untouched, "UPDATE jobs SET result = 'forged' WHERE job_id = 'j1'")
    assert since(untouched, checkpoint)[0] == 0  # not an entity of the tail: a full verify's
    assert foldline("verify", str(untouched)).returncode == 1
    extra = tmp_path / "extra.db"
    shutil.copy(pristine, extra)
    tamper(extra, "DELETE FROM jobs WHERE job_id = 'j9'")  # a row missing
    assert kinds(since(extra, checkpoint)[1]) == {"projection_mismatch"}
    added = tmp_path / "added.db"
    shutil.copy(pristine, added)
    tamper(  # a row the refold of a touched entity lacks
        added,
        "INSERT INTO controls (job_id, control, action, body, sent_by, state, recorded_at)"
        " VALUES ('j4', 999, 'cancel', '{}', 'forger', 'pending', '2026-01-01T00:00:00Z')",
    )
    code, report, _ = since(added, checkpoint)
    assert code == 1 and kinds(report) == {"projection_mismatch"}
    assert "channel" in report["violations"][0]["detail"]


def test_audit_since_checks_the_signature_with_a_key(
    extended: tuple[Path, Path], tmp_path: Path
) -> None:
    db, _ = extended
    fresh = tmp_path / "fresh.db"
    key, vkey = tmp_path / "log.key", tmp_path / "log.vkey"
    vkey.write_text(ok("keygen", "audit.example/log", "--out", str(key)))
    stranger = tmp_path / "stranger.vkey"
    stranger.write_text(ok("keygen", "audit.example/log", "--out", str(tmp_path / "s.key")))
    make_log(fresh)
    signed = tmp_path / "signed.txt"
    signed.write_text(ok("checkpoint", str(fresh), "--key", str(key)))
    add_tail(fresh)
    code, report, _ = since(fresh, signed, "--key", str(vkey))
    assert code == 0 and report["checkpoint"]["signature"] == "signed by audit.example/log"
    assert since(fresh, signed, "--key", vkey.read_text().strip())[0] == 0  # the key's text
    code, report, said = since(fresh, signed, "--key", str(stranger))
    assert code == 1 and not report["ok"] and "does not verify" in said
    assert since(fresh, signed)[0] == 0  # unchecked: the body as given
    assert since(fresh, signed, "--key", "not-a-key")[0] == 2
    assert foldline("verify", str(db), "--key", str(vkey)).returncode == 2  # needs --since


def test_audit_since_refuses_a_checkpoint_larger_than_the_log(
    extended: tuple[Path, Path], tmp_path: Path
) -> None:
    db, _ = extended
    short = tmp_path / "short.db"
    make_log(short)
    later = tmp_path / "later.txt"
    later.write_text(ok("checkpoint", str(db), "--origin", "audit.example/log"))
    code, report, _ = since(short, later)
    assert code == 1 and kinds(report) == {"checkpoint_mismatch"}
    assert "cut short" in report["violations"][0]["detail"]
    other = tmp_path / "other.db"  # as many events, another history: the heads differ
    make_log(other, clock=FixedClock(datetime(2030, 1, 1, tzinfo=UTC)))
    add_tail(other)
    code, report, _ = since(other, later)
    assert code == 1 and kinds(report) == {"checkpoint_mismatch"}
    malformed = tmp_path / "malformed.txt"
    malformed.write_text("origin\nnot a size\n")
    assert since(db, malformed)[0] == 2


def test_audit_since_on_a_postgresql_log(tmp_path: Path) -> None:
    url = session_cluster().url_for(tmp_path)
    checkpoint = tmp_path / "checkpoint.txt"
    make_log(url)  # type: ignore[arg-type]
    checkpoint.write_text(ok("checkpoint", url, "--origin", "audit.example/log"))
    add_tail(url)
    code, report, _ = since(url, checkpoint)
    assert code == 0 and report["verified"]["first"] == CHECKPOINT_AT + 1


def test_audit_since_reads_a_log_of_the_previous_schema_in_place(tmp_path: Path) -> None:
    """A schema-1 log (no stored tree nodes yet) is checked as it is, its tree computed."""
    db, checkpoint = tmp_path / "schema1.db", tmp_path / "checkpoint.txt"
    shutil.copy(Path(__file__).resolve().parents[1] / "golden" / "logs" / "schema1.db", db)
    checkpoint.write_text(ok("checkpoint", str(db), "--origin", "audit.example/log"))
    code, report, said = since(db, checkpoint)
    assert code == 0 and report["ok"] and report["checkpoint"]["consistent"], (report, said)
    assert report["db"] == str(db)  # in place: no migrated copy


@pytest.mark.parametrize(("through", "found"), [(1 << 62, "checkpoint_mismatch"), (600, None)])
def test_audit_since_over_stored_tree_nodes_trusts_them_as_a_full_verify_checks_them(
    tmp_path: Path, through: int, found: str | None
) -> None:
    """Over stored tree nodes the checkpoint is compared with the nodes, not with every chain
    hash before it. A forged history re-chained to the head changes the hash at the checkpoint
    and is caught; one re-chained only part way (its link after 600 left broken, on a stream
    the tail does not touch) is not: a full verify finds it, in the chain and in the nodes."""
    db, checkpoint = tmp_path / "log.db", tmp_path / "checkpoint.txt"
    log = open_log(db, TICKETS, [TicketTitles()])
    fill(log, 3 * BLOCK + 10)
    extend_tree(log)  # as the server's holder does at a renewal
    log.close()
    checkpoint.write_text(ok("checkpoint", str(db), "--origin", "audit.example/log"))
    log = open_log(db, TICKETS, [TicketTitles()])
    log.append("ticket:u", 0, [TicketOpened(title="u"), TicketNoted(text="after")])
    log.close()
    forged = '{"type":"ticket.noted","text":"forged"}'
    edit = f"UPDATE events SET payload = CAST('{forged}' AS BLOB) WHERE position = 100"
    forge_chain(db, edit, through=through)
    machines = ("--machines", "tests.support.tickets:MACHINES")
    full = foldline("verify", str(db), *machines)
    assert full.returncode == 1 and "tree_node_mismatch" in kinds(json.loads(full.stdout))
    code, report, said = since(db, checkpoint, *machines)
    if found is None:
        assert "hash_mismatch" in kinds(json.loads(full.stdout))  # the link after 600
        assert code == 0 and report["ok"], (report, said)
    else:
        assert code == 1 and kinds(report) == {found}, report
