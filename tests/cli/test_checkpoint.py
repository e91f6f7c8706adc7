"""``foldline checkpoint`` and ``verify --against``: a kept anchor proves history before it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import FixedClock
from engine.domain import commands as c
from projections import open_engine
from tests.cli.test_audit import EDITED_RESULT, FORGED_FINISH, forge_chain, tamper
from tests.support.cli import foldline


@pytest.fixture
def anchored(clean: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The clean log, its checkpoint, then more history after it."""
    anchor = tmp_path / "anchor.json"
    done = foldline("checkpoint", str(clean))
    assert done.returncode == 0, done.stderr
    anchor.write_text(done.stdout)
    engine = open_engine(clean, clock=FixedClock())
    engine.handle(c.AcceptJob(job_id="later", session_id="s1", prompt="p"))
    engine.log.close()
    return clean, anchor


def test_checkpoint_is_a_small_anchor_of_the_head(clean: Path) -> None:
    anchor = json.loads(foldline("checkpoint", str(clean)).stdout)
    assert anchor["position"] == 23 and anchor["streams"] == 7 and len(anchor["hash"]) == 64
    assert set(anchor) == {"format", "position", "hash", "recorded_at", "streams"}


def test_checkpoint_verify_against_passes_on_a_log_that_extends_it(
    anchored: tuple[Path, Path],
) -> None:
    db, anchor = anchored
    done = foldline("verify", str(db), "--against", str(anchor))
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["extends_checkpoint"] is True
    assert done.stderr.strip().splitlines() == [
        next(line for line in done.stderr.splitlines() if "extends the checkpoint" in line)
    ]
    assert "at position 23" in done.stderr


@pytest.mark.parametrize(
    ("rewrite", "reason"),
    [
        (lambda db: tamper(db, EDITED_RESULT), "chain breaks at position 13"),
        (lambda db: forge_chain(db, FORGED_FINISH), "different hash"),
        (lambda db: tamper(db, "DELETE FROM events WHERE position > 20"), "no longer reaches"),
    ],
    ids=["edited-before", "forged-chain", "truncated-before"],
)
def test_checkpoint_verify_against_fails_when_history_before_it_changed(
    anchored: tuple[Path, Path], rewrite: object, reason: str
) -> None:
    db, anchor = anchored
    rewrite(db)  # type: ignore[operator]
    done = foldline("verify", str(db), "--against", str(anchor))
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["extends_checkpoint"] is False
    found = [v for v in report["violations"] if v["kind"] == "checkpoint_mismatch"]
    assert len(found) == 1 and reason in found[0]["detail"], found


def test_checkpoint_verify_against_refuses_a_file_that_is_not_a_checkpoint(
    clean: Path, tmp_path: Path
) -> None:
    junk = tmp_path / "junk.json"
    for text in ("not json", '{"format": "x", "position": 1}', "[]"):
        junk.write_text(text)
        done = foldline("verify", str(clean), "--against", str(junk))
        assert done.returncode == 2 and done.stderr.startswith("foldline: invalid_argument:")
    missing = foldline("verify", str(clean), "--against", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
