from __future__ import annotations

import os
from pathlib import Path

from adapters.leasefile import LeaseFile, LeaseRecord


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
