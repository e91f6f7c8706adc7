"""WAL checkpoints run on the log's checkpoint thread, not inside a caller's COMMIT (ADR 0027)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine import Log, open_log
from engine.storage.sqlite import checkpoint as ckpt
from engine.storage.sqlite.storage import SqliteStorage
from tests.support.tickets import MACHINES, TicketOpened


def _append_past(log: Log, pages: int, prefix: str = "t") -> None:
    """Append until the writer's WAL hook has reported ``pages`` pages (bounded)."""
    writer = log.storage.writer()  # type: ignore[attr-defined]
    for i in range(20_000):
        log.append(f"ticket:{prefix}{i}", 0, [TicketOpened(title="x" * 400)])
        if writer._wal_pages >= pages:
            return
    raise AssertionError(f"the WAL never reached {pages} pages")


def _wait_for_checkpoints(storage: SqliteStorage, count: int, timeout_s: float = 30) -> None:
    done = storage.checkpoints.done
    with done:
        assert done.wait_for(lambda: storage.checkpoints.completed >= count, timeout_s)


def test_checkpoint_runs_on_its_own_thread_once_the_wal_is_large(db_path: Path) -> None:
    log = open_log(db_path, MACHINES)
    storage = log.storage
    assert isinstance(storage, SqliteStorage)
    try:
        _append_past(log, ckpt.CHECKPOINT_PAGES)
        _wait_for_checkpoints(storage, 1)
        assert storage.checkpoints.thread_ident not in (None, threading.get_ident())
        # Nothing was appended meanwhile: the thread copied every frame and left the last
        # step to the writer, whose next commits restart the WAL instead of growing it.
        assert storage.checkpoints.finish_wanted
        log.append("ticket:next", 0, [TicketOpened()])
        log.append("ticket:after", 0, [TicketOpened()])
        assert log.storage.writer()._wal_pages < 100  # type: ignore[attr-defined]
        assert log.verify_chain() == []
    finally:
        log.close()
    # Closing stopped the thread after its checkpoint; a new reader sees every event.
    assert storage.checkpoints._thread is None
    again = open_log(db_path, MACHINES)
    try:
        assert again.head() > 0 and again.verify_chain() == []
    finally:
        again.close()


def test_checkpoint_keeps_the_commit_path_free_of_checkpoints(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the thread kept from running, the WAL grows past SQLite's default threshold without
    # ever starting over: nothing inside COMMIT checkpoints any more.
    monkeypatch.setattr(ckpt.Checkpointer, "request", lambda self: None)
    log = open_log(db_path, MACHINES)
    writer = log.storage.writer()  # type: ignore[attr-defined]
    seen: list[int] = []
    try:
        for i in range(20_000):
            log.append(f"ticket:k{i}", 0, [TicketOpened(title="x" * 400)])
            seen.append(writer._wal_pages)
            if seen[-1] >= 2 * ckpt.CHECKPOINT_PAGES:
                break
        assert seen[-1] >= 2 * ckpt.CHECKPOINT_PAGES
        assert seen == sorted(seen)
    finally:
        log.close()


def test_checkpoint_backstop_bounds_the_wal_when_the_thread_is_behind(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ckpt.Checkpointer, "request", lambda self: None)
    monkeypatch.setattr("engine.storage.sqlite.writer.BACKSTOP_PAGES", 2 * ckpt.CHECKPOINT_PAGES)
    log = open_log(db_path, MACHINES)
    writer = log.storage.writer()  # type: ignore[attr-defined]
    seen: list[int] = []
    try:
        for i in range(20_000):
            log.append(f"ticket:b{i}", 0, [TicketOpened(title="x" * 400)])
            seen.append(writer._wal_pages)
            if seen[-1] >= 2 * ckpt.CHECKPOINT_PAGES:
                break
        log.append("ticket:after", 0, [TicketOpened()])
        # The writer checkpointed itself at the backstop: the WAL started over from its head.
        assert seen[-1] >= 2 * ckpt.CHECKPOINT_PAGES
        assert writer._wal_pages < 100
    finally:
        log.close()
