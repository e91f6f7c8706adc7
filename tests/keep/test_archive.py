"""``foldline archive`` on a real log of the built-in machines: the events before a signed
checkpoint go into a sealed segment, the file shrinks, the live log keeps appending and
proving, an archived position is proved from its segment, and ``verify`` of the live log with
its segments says what ``verify`` of the whole log said."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine import FixedClock
from engine.domain import commands as c
from engine.domain.rules import Settings
from projections import open_engine
from tests.support.cli import foldline

SESSIONS = 70  # about 420 events: more than one block of 256, so a cut moves a whole block


def ok(*args: str) -> str:
    done = foldline(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _add(path: Path, first: int, last: int) -> None:
    """Sessions ``first..last-1``, each with a job accepted under a caller's command id."""
    engine = open_engine(path, Settings(), clock=FixedClock())
    for i in range(first, last):
        engine.handle(c.CreateSession(session_id=f"s{i}", start_run_id=f"r{i}"))
        engine.handle(
            c.AcceptJob(job_id=f"j{i}", session_id=f"s{i}", prompt=f"p{i}" * 40,
                        command_id=f"caller-{i}")
        )  # fmt: skip
        engine.handle(c.StartJob(job_id=f"j{i}", run_id=f"run{i}"))
        engine.handle(c.FinishJob(job_id=f"j{i}", outcome="ok", result=f"done {i}" * 20))
    engine.log.close()


@pytest.fixture
def archived(tmp_path: Path) -> dict[str, object]:
    """A log checkpointed (signed) at its head, appended to, copied whole, then archived."""
    db, whole = tmp_path / "live.db", tmp_path / "whole-before.db"
    _add(db, 0, SESSIONS)
    key, vkey = tmp_path / "log.key", tmp_path / "log.vkey"
    vkey.write_text(ok("keygen", "audit.example/keep", "--out", str(key)))
    checkpoint = tmp_path / "at.checkpoint"
    checkpoint.write_text(ok("checkpoint", str(db), "--key", str(key)))
    size = int(checkpoint.read_text().splitlines()[1])
    _add(db, SESSIONS, SESSIONS + 5)
    ok("copy", str(db), str(whole))
    report = json.loads(ok("archive", str(db), "--before", str(checkpoint), "--key", str(vkey)))
    return {"db": db, "whole": whole, "checkpoint": checkpoint, "vkey": vkey, "size": size,
            "report": report}  # fmt: skip


def test_archive_seals_a_segment_and_gives_the_space_back(archived: dict[str, object]) -> None:
    report, size = archived["report"], archived["size"]
    assert isinstance(report, dict)
    assert report["archived"] == {"first": 1, "last": size}
    assert report["live_from"] == size - size % 256 + 1
    assert report["bytes"]["after"] < report["bytes"]["before"]
    segment = Path(report["segment"])
    assert segment.is_file()
    assert oct(segment.stat().st_mode & 0o777) == oct(0o444)
    assert report["commands_kept"] > 0
    # The figures the closing note quotes (run with -s to see them).
    print(
        f"archive: {report['bytes']['before']} bytes before, {report['bytes']['after']} after;"
        f" segment {segment.name} {segment.stat().st_size} bytes, positions 1..{size}"
    )


def test_archive_verify_of_live_and_segments_equals_verify_of_the_whole(
    archived: dict[str, object],
) -> None:
    db, whole = str(archived["db"]), str(archived["whole"])
    live, before = json.loads(ok("verify", db)), json.loads(ok("verify", whole))
    assert {k: v for k, v in live.items() if k != "db"} == {
        k: v for k, v in before.items() if k != "db"
    }
    assert live["ok"] and live["events"] == before["events"]
    since = json.loads(
        ok("verify", db, "--since", str(archived["checkpoint"]), "--key", str(archived["vkey"]))
    )
    assert since["ok"] and since["checkpoint"]["consistent"]
    # Written whole again, it is the log it was, row for row.
    rejoined = Path(whole).with_name("rejoined.db")
    ok("archive", db, "--join", str(rejoined))
    assert ok("export", str(rejoined)) == ok("export", whole)


def test_archive_proves_an_archived_position_from_its_segment(
    archived: dict[str, object], tmp_path: Path
) -> None:
    db, whole, size = str(archived["db"]), str(archived["whole"]), archived["size"]
    proof = json.loads(ok("prove", "inclusion", db, "5", "--size", str(size)))
    assert proof["segment"].endswith(".segment.xz")
    expected = json.loads(ok("prove", "inclusion", whole, "5", "--size", str(size)))
    assert {k: v for k, v in proof.items() if k != "segment"} == expected
    saved = tmp_path / "p5.json"
    saved.write_text(json.dumps(proof))
    checked = foldline("verify-proof", "--key", str(archived["vkey"]), "--checkpoint",
                       str(archived["checkpoint"]), "--inclusion", str(saved))  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    shown = {k: v for k, v in proof.items() if k not in ("segment", "path", "proof")}
    print(f"proof of position 5 served from {Path(proof['segment']).name}: {shown}; verified")
    # Live positions and consistency from the checkpoint are proved by the live log alone.
    head = json.loads(ok("verify", whole))["events"]
    assert ok("prove", "inclusion", db, str(head)) == ok("prove", "inclusion", whole, str(head))
    assert ok("prove", "consistency", db, str(size)) == ok("prove", "consistency", whole, str(size))


def test_archive_keeps_appending_answering_old_command_ids_and_refuses_a_refold(
    archived: dict[str, object],
) -> None:
    db = Path(str(archived["db"]))
    engine = open_engine(db, Settings(), clock=FixedClock())
    try:
        again = engine.handle(
            c.AcceptJob(job_id="j0", session_id="s0", prompt="p0" * 40, command_id="caller-0")
        )
        report = archived["report"]
        assert isinstance(report, dict)
        assert again.duplicate and again.first_position < report["live_from"]
        engine.handle(c.CreateSession(session_id="after", start_run_id="r-after"))
    finally:
        engine.log.close()
    assert json.loads(ok("verify", str(db)))["ok"]
    refused = foldline("rebuild", str(db))
    assert refused.returncode == 2 and "--join" in refused.stderr


def test_archive_refuses_what_it_cannot_do(archived: dict[str, object], tmp_path: Path) -> None:
    db, checkpoint = str(archived["db"]), str(archived["checkpoint"])
    again = foldline("archive", db, "--before", checkpoint)
    assert again.returncode == 2 and "nothing to archive" in again.stderr
    other = tmp_path / "other.key"
    other_vkey = tmp_path / "other.vkey"
    other_vkey.write_text(ok("keygen", "audit.example/other", "--out", str(other)))
    forged = foldline("archive", db, "--before", checkpoint, "--key", str(other_vkey))
    assert forged.returncode == 1
    pg = foldline("archive", "postgresql://127.0.0.1/x", "--before", checkpoint)
    assert pg.returncode == 2 and "SQLite" in pg.stderr
    # A segment moved away is named, not guessed around.
    segments = Path(db + ".segments")
    shutil.move(segments, tmp_path / "elsewhere")
    missing = foldline("verify", db)
    assert missing.returncode == 2 and "put the segment back" in missing.stderr


def test_archive_twice_chains_the_segments_and_proves_from_either(
    archived: dict[str, object], tmp_path: Path
) -> None:
    db = Path(str(archived["db"]))
    _add(db, SESSIONS + 5, SESSIONS + 60)  # past the next block
    later = tmp_path / "later.checkpoint"
    later.write_text(ok("checkpoint", str(db), "--key", str(tmp_path / "log.key")))
    second = json.loads(ok("archive", str(db), "--before", str(later)))
    first_size = archived["size"]
    assert isinstance(first_size, int)
    assert second["archived"]["first"] == first_size + 1
    assert len(list(Path(str(db) + ".segments").iterdir())) == 2
    verified = json.loads(ok("verify", str(db)))
    assert verified["ok"], verified
    size = int(later.read_text().splitlines()[1])
    for position in (3, first_size + 2):
        proof = json.loads(ok("prove", "inclusion", str(db), str(position), "--size", str(size)))
        saved = tmp_path / f"p{position}.json"
        saved.write_text(json.dumps(proof))
        checked = foldline("verify-proof", "--key", str(archived["vkey"]), "--checkpoint",
                           str(later), "--inclusion", str(saved))  # fmt: skip
        assert checked.returncode == 0, checked.stderr
    # A replica that starts after the cut would miss the archived events: refused, clearly.
    late = foldline("backup", str(db), str(tmp_path / "replica"))
    assert late.returncode == 2 and "--join" in late.stderr
