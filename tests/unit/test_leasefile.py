from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from adapters.system import leasefile
from adapters.system.leasefile import LeaseFile, LeaseRecord


def _record(holder: str, epoch: int = 1) -> LeaseRecord:
    return LeaseRecord(holder=holder, epoch=epoch, host="h", pid=os.getpid(), renewed_at=1.0)


def test_leasefile_is_claimed_exclusively_and_replaced_whole(tmp_path: Path) -> None:
    lease = LeaseFile(tmp_path / "foldline.db")
    assert lease.path.name == "foldline.db.lease" and lease.read() is None
    assert lease.claim(_record("a"))
    assert not lease.claim(_record("b"))  # create-exclusive: the second claimant loses
    assert lease.read() == _record("a")
    lease.replace(_record("b", epoch=2))
    assert lease.read() == _record("b", epoch=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foldline.db.lease"]  # no temp left


def test_leasefile_claim_is_never_seen_before_its_record_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers of one server race for a fresh lease: the loser of the claim reads the file
    to see whose it is. Read while the winner is still writing its record, a file created
    first and written after is unreadable, held by nobody known, and the loser answered
    lease-busy for its own instance (a 503 seen once in 30 runs of the twenty-request server
    test under load)."""
    lease = LeaseFile(tmp_path / "foldline.db")
    seen: list[Any] = []
    dump = leasefile.json.dump

    def dump_and_look(record: Any, handle: Any) -> None:
        seen.append(lease.read())  # what a racing worker reads while the record is written
        dump(record, handle)

    monkeypatch.setattr(leasefile.json, "dump", dump_and_look)
    assert lease.claim(_record("a"))
    assert seen == [None]
    assert lease.read() == _record("a")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foldline.db.lease"]


def test_leasefile_is_removed_only_by_its_holder(tmp_path: Path) -> None:
    lease = LeaseFile(tmp_path / "foldline.db")
    lease.claim(_record("a"))
    lease.remove("b")
    assert lease.read() is not None
    lease.remove("a")
    assert lease.read() is None


def test_leasefile_that_cannot_be_read_counts_as_held_by_nobody_known(tmp_path: Path) -> None:
    lease = LeaseFile(tmp_path / "foldline.db")
    lease.path.write_text("{garbage")
    record = lease.read()
    assert record is not None and record.holder == "?"
