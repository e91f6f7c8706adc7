"""A log file that vanishes under an open log is noticed before the next commit (ADR 0029), and
the server's anchor is a checkpoint an auditor can hold a log against."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from adapters.system import log_anchor
from engine import LogMissing, open_log
from engine.audit import verify_against
from engine.audit.anchor import ServerAnchor, load
from engine.log import Log
from engine.storage.sqlite.files import FileIdentity
from tests.support.tickets import MACHINES, TicketOpened, TicketTitles


def _log(db: Path) -> Log:
    return open_log(db, MACHINES, [TicketTitles()])


def _open_ticket(log: Log, n: int) -> None:
    log.append(f"ticket:t{n}", 0, [TicketOpened(title=f"t{n}")])


def _count(db: Path) -> int:
    log = _log(db)
    try:
        return log.head()
    finally:
        log.close()


@pytest.mark.parametrize("how", ["deleted", "directory removed", "moved", "replaced"])
def test_a_commit_after_the_file_went_is_refused_and_so_is_every_later_one(
    tmp_path: Path, how: str
) -> None:
    db = tmp_path / "ws" / ".foldline" / "foldline.db"
    log = _log(db)
    _open_ticket(log, 1)
    head = log.head()
    if how == "deleted":
        for sidecar in db.parent.glob("foldline.db*"):
            sidecar.unlink()
    elif how == "directory removed":
        shutil.rmtree(db.parent)
    elif how == "moved":
        db.parent.rename(tmp_path / "elsewhere")
    else:
        other = _log(tmp_path / "other.db")
        other.close()
        os.replace(tmp_path / "other.db", db)
    with pytest.raises(LogMissing, match="no more writes are taken"):
        _open_ticket(log, 2)
    with pytest.raises(LogMissing):  # for good, even if a file reappears at the path
        _open_ticket(log, 3)
    assert log.head() == head  # nothing acknowledged into the unlinked file
    log.close()
    if how == "moved":  # the moved log holds what was committed, and nothing after
        assert _count(tmp_path / "elsewhere" / "foldline.db") == head


def test_a_new_connection_never_creates_an_empty_file_where_the_log_was(tmp_path: Path) -> None:
    db = tmp_path / "foldline.db"
    log = _log(db)
    _open_ticket(log, 1)
    for sidecar in tmp_path.glob("foldline.db*"):
        sidecar.unlink()

    def read_in_a_new_thread() -> BaseException | None:
        failure: list[BaseException] = []

        def read() -> None:
            try:
                log.head()
            except BaseException as ex:
                failure.append(ex)

        thread = threading.Thread(target=read)
        thread.start()
        thread.join(timeout=10)
        return failure[0] if failure else None

    assert isinstance(read_in_a_new_thread(), LogMissing)
    assert not db.exists()
    log.close()


def _anchored(db: Path) -> tuple[Log, ServerAnchor]:
    """A log of three events and the anchor of its head."""
    log = _log(db)
    for n in range(3):
        _open_ticket(log, n)
    anchor = log_anchor.head_of(log.connection(), db)
    assert anchor is not None
    return log, anchor


def test_the_anchor_is_the_head_and_a_checkpoint_verify_accepts(tmp_path: Path) -> None:
    db = tmp_path / "foldline.db"
    log, anchor = _anchored(db)
    assert anchor.position == log.head()
    assert (anchor.device, anchor.inode) == (db.stat().st_dev, db.stat().st_ino)
    path = log_anchor.anchor_file(tmp_path / "state", db)
    log_anchor.write(path, anchor)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert log_anchor.read(path) == anchor
    assert log_anchor.missing_reason(anchor, db, log.connection()) is None
    _open_ticket(log, 9)  # a log that grew still extends it
    assert log_anchor.missing_reason(anchor, db, log.connection()) is None
    log.close()
    checkpoint = load(path.read_bytes())
    assert (checkpoint.position, checkpoint.hash) == (anchor.position, anchor.hash)
    assert verify_against(db, checkpoint, []) is None


def test_a_log_that_does_not_extend_its_anchor_is_named_for_why(tmp_path: Path) -> None:
    db = tmp_path / "foldline.db"
    log, anchor = _anchored(db)
    log.close()
    assert log_anchor.missing_reason(anchor, db, None) == f"{db} is gone"
    shorter = _log(tmp_path / "shorter.db")
    _open_ticket(shorter, 0)
    reason = log_anchor.missing_reason(anchor, db, shorter.connection())
    assert reason == f"{db} does not reach position {anchor.position}"
    for n in range(1, 5):
        _open_ticket(shorter, n + 10)
    reason = log_anchor.missing_reason(anchor, db, shorter.connection())
    assert reason == f"{db} holds another event at position {anchor.position}"
    shorter.close()
    refused = log_anchor.refusal(anchor, "it is gone", tmp_path / "a.json")
    assert refused.code == "log_missing" and "--new-log" in refused.message


def test_an_unreadable_anchor_refuses_rather_than_being_ignored(tmp_path: Path) -> None:
    path = tmp_path / "anchor.json"
    path.write_text("{not json")
    with pytest.raises(LogMissing, match="cannot be read"):
        log_anchor.read(path)
    assert log_anchor.read(tmp_path / "none.json") is None


class _Unasked:
    """A connection whose VFS does not answer SQLITE_FCNTL_HAS_MOVED (a custom VFS may not)."""

    def file_control(self, dbname: str, op: int, pointer: int) -> bool:
        return False


def test_a_vfs_that_cannot_say_whether_the_file_moved_gets_the_full_check(
    tmp_path: Path,
) -> None:
    db = tmp_path / "foldline.db"
    db.write_bytes(b"")
    identity = FileIdentity(str(db))
    identity.check_open(_Unasked())  # the path holds: nothing raised
    db.unlink()
    with pytest.raises(LogMissing, match="is gone"):
        identity.check_open(_Unasked())


def test_sqlite_finding_the_file_unmoved_is_not_trusted_after_a_loss(tmp_path: Path) -> None:
    db = tmp_path / "foldline.db"
    log = _log(db)
    _open_ticket(log, 1)
    moved = tmp_path / "moved.db"
    for sidecar in tmp_path.glob("foldline.db*"):
        sidecar.rename(moved.with_name(sidecar.name.replace("foldline", "moved")))
    with pytest.raises(LogMissing):
        _open_ticket(log, 2)
    for sidecar in tmp_path.glob("moved.db*"):  # back where it was: the same inode again
        sidecar.rename(db.with_name(sidecar.name.replace("moved", "foldline")))
    with pytest.raises(LogMissing, match="no more writes are taken"):
        _open_ticket(log, 3)
    log.close()
    assert _count(db) == 1
