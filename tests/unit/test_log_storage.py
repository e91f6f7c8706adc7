"""What only the SQLite log does: triggers, chain, schema, projections, fencing, signals."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import apsw
import pytest

from engine import (
    ConcurrencyError,
    FencedOut,
    InvalidTransition,
    Log,
    NotALog,
    SchemaTooNew,
    open_log,
    signals,
)
from engine.storage.seam import Migration
from engine.storage.sqlite.schema import MIGRATIONS, migrate
from tests.support.tickets import (
    MACHINES,
    TicketNoted,
    TicketOpened,
    TicketStarted,
    TicketTitles,
)


def _raw(path: Path) -> apsw.Connection:
    return apsw.Connection(str(path))


def test_log_events_are_append_only_in_the_database(log: Log, db_path: Path) -> None:
    log.append("ticket:a", 0, [TicketOpened()], command_id="c")
    raw = _raw(db_path)
    for sql in (
        "UPDATE events SET state = 'done'",
        "DELETE FROM events",
        "UPDATE commands SET stream_id = 'x'",
        "DELETE FROM commands",
    ):
        with pytest.raises(apsw.ConstraintError, match="append-only"):
            raw.execute(sql)
    assert log.head() == 1 and log.verify_chain() == []


def test_log_chain_detects_a_row_edited_behind_the_triggers_back(log: Log, db_path: Path) -> None:
    for i in range(5):
        log.append(f"ticket:{i}", 0, [TicketOpened(title=str(i))])
    assert log.verify_chain() == []
    raw = _raw(db_path)
    raw.execute("DROP TRIGGER events_refuse_update")
    evil = b'{"type":"ticket.opened","title":"evil"}'
    raw.execute("UPDATE events SET payload = ? WHERE position = 3", (evil,))
    violations = log.verify_chain()
    assert [(v.position, v.kind) for v in violations] == [(3, "hash_mismatch")]


def test_log_chain_detects_a_deleted_row(log: Log, db_path: Path) -> None:
    for i in range(4):
        log.append(f"ticket:{i}", 0, [TicketOpened()])
    raw = _raw(db_path)
    raw.execute("DROP TRIGGER events_refuse_delete")
    raw.execute("DELETE FROM events WHERE position = 2")
    kinds = {(v.position, v.kind) for v in log.verify_chain()}
    assert (2, "position_gap") in kinds and (3, "hash_mismatch") in kinds


def test_log_chain_detects_swapped_rows(log: Log, db_path: Path) -> None:
    for i in range(4):
        log.append(f"ticket:{i}", 0, [TicketOpened()])
    raw = _raw(db_path)
    raw.execute("DROP TRIGGER events_refuse_update")
    for sql in (
        "UPDATE events SET position = -2 WHERE position = 2",
        "UPDATE events SET position = 2 WHERE position = 3",
        "UPDATE events SET position = 3 WHERE position = -2",
    ):
        raw.execute(sql)  # rows keep their hashes but trade places
    # the swap breaks the links into, between and out of the two rows
    assert {v.position for v in log.verify_chain()} == {2, 3, 4}


def test_log_file_from_a_newer_release_is_refused(db_path: Path) -> None:
    open_log(db_path, MACHINES).close()
    _raw(db_path).execute("INSERT INTO schema_migrations VALUES (99, 'future', 'x')")
    with pytest.raises(SchemaTooNew) as caught:
        open_log(db_path, MACHINES)
    assert (caught.value.found, caught.value.supported) == (99, MIGRATIONS[-1].number)
    assert "upgrade foldline" in str(caught.value)


def test_log_file_from_an_older_release_is_migrated(db_path: Path) -> None:
    open_log(db_path, MACHINES).close()
    number = MIGRATIONS[-1].number + 1
    newer = (*MIGRATIONS, Migration(number, "add a note table", "CREATE TABLE notes (x TEXT)"))
    conn = _raw(db_path)
    assert migrate(conn, str(db_path), "2026-01-01T00:00:00.000000Z", newer) == number
    assert migrate(conn, str(db_path), "2026-01-01T00:00:00.000000Z", newer) == number
    numbers = [r[0] for r in conn.execute("SELECT number FROM schema_migrations ORDER BY 1")]
    assert numbers == list(range(1, number + 1))
    conn.execute("SELECT x FROM notes").fetchall()


def test_log_refuses_files_that_are_not_foldline_logs(tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_bytes(b"this is not sqlite at all, just text" * 100)
    with pytest.raises(NotALog):
        open_log(text, MACHINES)
    other = tmp_path / "other.db"
    _raw(other).execute("CREATE TABLE people (name TEXT)")
    with pytest.raises(NotALog):
        open_log(other, MACHINES)


def test_log_projection_rebuild_equals_incremental_tables(log: Log) -> None:
    for i in range(20):
        log.append(
            f"ticket:{i % 7}",
            log.stream_head(f"ticket:{i % 7}").version,
            [TicketOpened()]
            if i < 7
            else [TicketNoted(text=str(i))]
            if i % 2
            else [TicketStarted()]
            if log.stream_head(f"ticket:{i % 7}").state == "open"
            else [TicketNoted()],
        )
    incremental = log.content_hash()
    assert log.rebuild() == incremental
    row = (
        log.connection()
        .execute("SELECT version, state, first_position FROM streams WHERE stream_id = 'ticket:0'")
        .fetchall()
    )
    assert row[0][0] == log.stream_head("ticket:0").version and row[0][2] == 1


def _titles(log: Log) -> list[tuple[str, str, int]]:
    return log.connection().execute("SELECT * FROM ticket_titles ORDER BY 1").fetchall()


def test_log_projection_version_bump_rebuilds_at_open(db_path: Path) -> None:
    log = open_log(db_path, MACHINES, [TicketTitles()])
    log.append("ticket:a", 0, [TicketOpened(title="a"), TicketNoted()])
    before = log.content_hash()
    log.connection().execute("DELETE FROM ticket_titles")  # damage it; a rebuild must restore it
    log.close()

    class TicketTitlesV2(TicketTitles):
        version = 2

    reopened = open_log(db_path, MACHINES, [TicketTitlesV2()])
    assert reopened.content_hash() == before
    assert _titles(reopened) == [("ticket:a", "a", 1)]
    assert reopened.connection().execute(
        "SELECT version, checkpoint FROM projections WHERE name = 'ticket_titles'"
    ).fetchall() == [(2, None)]
    reopened.close()


def test_log_projection_added_later_catches_up_at_open(db_path: Path) -> None:
    bare = open_log(db_path, MACHINES)
    bare.append("ticket:a", 0, [TicketOpened(title="t"), TicketStarted(), TicketNoted()])
    bare.close()
    log = open_log(db_path, MACHINES, [TicketTitles()])
    assert _titles(log) == [("ticket:a", "t", 1)]
    assert log.connection().execute("SELECT state FROM streams").fetchall() == [("working",)]
    assert log.content_hash() == log.rebuild()
    log.close()


def test_log_projection_kept_by_one_writer_only_is_never_applied_twice(db_path: Path) -> None:
    keeper = open_log(db_path, MACHINES, [TicketTitles()])
    other = open_log(db_path, MACHINES)  # a second writer that does not keep ticket_titles
    keeper.append("ticket:a", 0, [TicketOpened(title="a"), TicketNoted()])
    other.append("ticket:a", 2, [TicketNoted(), TicketNoted()])
    other.append("ticket:b", 0, [TicketOpened(title="b")])
    checkpoint = (
        keeper.connection()
        .execute("SELECT checkpoint FROM projections WHERE name = 'ticket_titles'")
        .fetchall()
    )
    assert checkpoint == [(2,)]  # lagging from where the other writer started
    keeper.append("ticket:b", 1, [TicketNoted()])  # catches up first, then applies its own
    assert _titles(keeper) == [("ticket:a", "a", 3), ("ticket:b", "b", 1)]
    assert keeper.content_hash() == keeper.rebuild()
    other.close()
    keeper.close()


def test_log_refuses_an_epoch_older_than_the_newest(log: Log) -> None:
    log.append("ticket:a", 0, [TicketOpened()], epoch=3)
    with pytest.raises(FencedOut) as caught:
        log.append("ticket:b", 0, [TicketOpened()], epoch=2)
    assert (caught.value.epoch, caught.value.current_epoch) == (2, 3)
    log.fence(3)  # the default epoch of later appends
    log.append("ticket:b", 0, [TicketOpened()])
    assert [e.epoch for e in log.read_all()] == [3, 3]


def test_log_signal_fires_after_commit_with_the_event_visible(log: Log, db_path: Path) -> None:
    seen: list[tuple[int, int]] = []

    def on_commit(sender: Log, position: int) -> None:
        other = _raw(db_path)  # a separate connection only sees committed data
        seen.append((position, other.execute("SELECT count(*) FROM events").fetchall()[0][0]))

    signals.committed.connect(on_commit, sender=log)
    try:
        log.append("ticket:a", 0, [TicketOpened()])
        with pytest.raises(ConcurrencyError):
            log.append("ticket:a", 0, [TicketOpened()])
    finally:
        signals.committed.disconnect(on_commit, sender=log)
    assert seen == [(1, 1)]


def test_log_group_commit_gives_each_caller_its_own_outcome(log: Log) -> None:
    log.append("ticket:shared", 0, [TicketOpened()])
    outcomes: dict[int, object] = {}
    gate = threading.Event()
    # A write that holds the transaction until the gate opens: the sixteen callers queue
    # behind it, so they must commit as one shared batch (white-box: the queue is watched).
    holder = threading.Thread(target=lambda: log.write(lambda tx: gate.wait(10)))
    holder.start()

    def writer(i: int) -> None:
        try:
            if i % 4 == 0:  # all race for the same version: exactly one can win
                outcomes[i] = log.append("ticket:shared", 1, [TicketStarted()])
            elif i % 4 == 1:
                outcomes[i] = log.append(f"ticket:{i}", 0, [TicketStarted()])  # illegal
            else:
                outcomes[i] = log.append(f"ticket:{i}", 0, [TicketOpened()])
        except Exception as ex:  # collected and asserted below
            outcomes[i] = ex

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(log._group._queue) < 16 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(log._group._queue) == 16, "the writers never queued behind the held transaction"
    gate.set()
    holder.join(timeout=30)
    for t in threads:
        t.join(timeout=30)
    assert log.stats.batch_sizes.get(16) == 1, log.stats.batch_sizes  # one shared commit
    racers = [outcomes[i] for i in range(0, 16, 4)]
    assert sum(not isinstance(o, Exception) for o in racers) == 1
    assert sum(isinstance(o, ConcurrencyError) for o in racers) == 3
    assert all(isinstance(outcomes[i], InvalidTransition) for i in range(1, 16, 4))
    assert all(getattr(outcomes[i], "state", None) == "open" for i in range(16) if i % 4 > 1)
    assert log.head() == 1 + 1 + 8
    assert log.verify_chain() == []
    assert log.content_hash() == log.rebuild()


def test_log_sync_normal_is_an_option_and_bad_settings_are_refused(db_path: Path) -> None:
    log = open_log(db_path, MACHINES, sync="normal")
    assert log.connection().execute("PRAGMA synchronous").fetchall() == [(1,)]
    assert log.connection().execute("PRAGMA journal_mode").fetchall() == [("wal",)]
    log.close()
    full = open_log(db_path, MACHINES)
    assert full.connection().execute("PRAGMA synchronous").fetchall() == [(2,)]
    full.close()
    with pytest.raises(ValueError, match="sync"):
        open_log(db_path, MACHINES, sync="off")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="busy_timeout"):
        open_log(db_path, MACHINES, busy_timeout_ms=100)


def test_log_wait_for_wakes_on_an_in_process_commit(log: Log) -> None:
    timer = threading.Timer(0.05, lambda: log.append("ticket:a", 0, [TicketOpened()]))
    started = time.monotonic()
    timer.start()
    assert log.wait_for(0, timeout=5)
    # woken by the commit, not by the timeout: well before it, and not before the commit
    assert 0.04 <= time.monotonic() - started < 2.5
    assert not log.wait_for(1, timeout=0.05)
    timer.join()
