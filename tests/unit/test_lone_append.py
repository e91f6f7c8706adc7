"""A lone plain append on a quiet log skips the transaction's scopes (``engine.write.lone``):
it must leave the rows, read models, results and refusals the transaction's path leaves."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from engine import (
    ConcurrencyError,
    Event,
    FencedOut,
    FixedClock,
    InvalidArgument,
    InvalidTransition,
    Log,
    StorageError,
    open_log,
)
from engine.log import open_log_readonly
from engine.write import lone
from engine.write.group_commit import GroupCommit
from tests.support.tickets import (
    MACHINES,
    TicketFinished,
    TicketNoted,
    TicketOpened,
    TicketStarted,
    TicketTitles,
)

# Every kind of append the fast path takes: a new stream, a folded event (the titles read
# model), several events at once (the second's guard sees the first's head), a stream met
# again after others.
APPENDS: list[tuple[str, int, list[Event]]] = [
    ("ticket:a", 0, [TicketOpened(title="a")]),
    ("ticket:b", 0, [TicketOpened(title="b"), TicketNoted(text="b1")]),
    ("ticket:a", 1, [TicketStarted(worker="w"), TicketNoted(text="a1")]),
    ("ticket:a", 3, [TicketFinished(outcome="ok")]),
    ("ticket:b", 2, [TicketNoted(text="b2")]),
]


@pytest.fixture
def alone_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The stream of every append that took the fast path, whichever way in (``append_now``
    from ``Log.append``, or a batch of one), from when a test asks for it: after ``logs``,
    which each test names first."""
    calls: list[str] = []
    original = lone._append

    def counted(context: Any, writer: Any, plain: Any, started: float) -> Any:
        calls.append(plain[0])
        return original(context, writer, plain, started)

    monkeypatch.setattr(lone, "_append", counted)
    return calls


def open_two(tmp_path: Path) -> Iterator[tuple[Log, Log]]:
    clock = FixedClock()
    fast = open_log(tmp_path / "fast.db", MACHINES, [TicketTitles()], clock=clock)
    scoped = open_log(tmp_path / "scoped.db", MACHINES, [TicketTitles()], clock=clock)
    try:
        # A log's first batch after opening reads what it knows: the appends after it are
        # the lone ones this file is about.
        for log in (fast, scoped):
            log.append("ticket:warm", 0, [TicketOpened(title="w")])
        yield fast, scoped
    finally:
        fast.close()
        scoped.close()


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[tuple[Log, Log]]:
    yield from open_two(tmp_path)


def table(log: Log, name: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in log.connection().execute(f"SELECT * FROM {name} ORDER BY 1, 2")]


def test_lone_append_leaves_the_rows_and_results_of_the_transaction(
    logs: tuple[Log, Log], alone_calls: list[str]
) -> None:
    fast, scoped = logs
    for stream_id, expected, events in APPENDS:
        ours = fast.append(stream_id, expected, events)
        theirs = scoped.write(lambda tx, s=stream_id, x=expected, e=events: tx.append(s, x, e))
        assert ours == theirs
    assert alone_calls == [s for s, _, _ in APPENDS]
    for name in ("events", "streams", "ticket_titles"):
        assert table(fast, name) == table(scoped, name)
    assert fast.content_hash() == scoped.content_hash()
    assert fast.stats.events == len(table(fast, "events"))


@pytest.mark.parametrize(
    ("stream_id", "expected", "events", "error"),
    [
        ("ticket:a", 0, [TicketOpened(title="again")], ConcurrencyError),
        ("ticket:a", 1, [TicketFinished(outcome="ok")], InvalidTransition),
        ("ticket:a", 1, [TicketStarted(), TicketOpened(title="x")], InvalidTransition),
    ],
)
def test_lone_append_refuses_as_the_transaction_does_and_keeps_the_log(
    logs: tuple[Log, Log],
    alone_calls: list[str],
    stream_id: str,
    expected: int,
    events: list[Event],
    error: type[Exception],
) -> None:
    fast, scoped = logs
    fast.append("ticket:a", 0, [TicketOpened(title="a")])
    scoped.write(lambda tx: tx.append("ticket:a", 0, [TicketOpened(title="a")]))
    with pytest.raises(error) as ours:
        fast.append(stream_id, expected, events)
    with pytest.raises(error) as theirs:
        scoped.write(lambda tx: tx.append(stream_id, expected, events))
    assert str(ours.value) == str(theirs.value)
    assert table(fast, "events") == table(scoped, "events")
    # The refusal kept what the log knew: the next lone append is right, and fast again.
    fast.append("ticket:a", 1, [TicketStarted(worker="w")])
    assert fast.read_stream("ticket:a")[-1].state == "working"
    assert alone_calls == ["ticket:a"] * 3


def test_lone_append_refuses_an_older_epoch_and_a_bad_one(
    logs: tuple[Log, Log], alone_calls: list[str]
) -> None:
    fast, _ = logs
    fast.fence(3)
    fast.append("ticket:a", 0, [TicketOpened(title="a")])
    with pytest.raises(FencedOut):
        fast.append("ticket:a", 1, [TicketNoted(text="late")], epoch=2)
    with pytest.raises(InvalidArgument):
        fast.append("ticket:a", 1, [TicketNoted(text="bad")], epoch=-1)
    assert [e.epoch for e in fast.read_stream("ticket:a")] == [3]
    assert alone_calls == ["ticket:a"] * 3


def test_lone_append_takes_the_transaction_when_the_log_is_not_quiet(
    logs: tuple[Log, Log], alone_calls: list[str]
) -> None:
    fast, _ = logs
    fast.append("ticket:a", 0, [TicketOpened(title="a")])
    # A command id is recorded by the transaction's scopes.
    fast.append("ticket:a", 1, [TicketNoted(text="c")], command_id="cmd-1")
    # Another connection's commit makes the cache stale: the transaction reads again.
    other = apsw.Connection(fast.path)
    other.execute("BEGIN IMMEDIATE; CREATE TABLE elsewhere (x); COMMIT")
    other.close()
    fast.append("ticket:a", 2, [TicketNoted(text="after")])
    assert alone_calls == ["ticket:a"]
    fast.append("ticket:a", 3, [TicketNoted(text="quiet again")])
    assert alone_calls == ["ticket:a"] * 2
    assert [e.version for e in fast.read_stream("ticket:a")] == [1, 2, 3, 4]


def test_lone_append_on_a_log_that_records_its_declarations(
    tmp_path: Path, alone_calls: list[str]
) -> None:
    log = open_log(tmp_path / "d.db", MACHINES, [TicketTitles()], record_declarations=True)
    try:
        log.append("ticket:a", 0, [TicketOpened(title="a")])  # records them first
        log.append("ticket:a", 1, [TicketNoted(text="n")])
        streams = [e.stream_id for e in log.read_all()]
    finally:
        log.close()
    assert streams == ["log:declarations", "ticket:a", "ticket:a"]
    assert alone_calls == ["ticket:a"]


def test_lone_append_and_write_refuse_a_read_only_log_and_change_nothing(tmp_path: Path) -> None:
    """Every way into the group commit (an append with or without a command id, a write)
    is refused on a log opened read-only, the fast path's included, and writes nothing."""
    path = tmp_path / "ro.db"
    log = open_log(path, MACHINES, [TicketTitles()])
    log.append("ticket:a", 0, [TicketOpened(title="a")])
    log.close()
    reader = open_log_readonly(path, MACHINES, [TicketTitles()])
    try:
        calls = [
            lambda: reader.append("ticket:b", 0, [TicketOpened(title="b")]),
            lambda: reader.append("ticket:b", 0, [TicketOpened(title="b")], command_id="c1"),
            lambda: reader.write(lambda tx: None),
        ]
        for call in calls:
            with pytest.raises(StorageError, match="opened read-only"):
                call()
    finally:
        reader.close()
    again = open_log(path, MACHINES, [TicketTitles()])
    try:
        assert [row[1] for row in table(again, "events")] == ["ticket:a"]
    finally:
        again.close()


def test_an_append_alone_takes_the_lead_without_a_batch(
    logs: tuple[Log, Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Log.append`` takes the lead straight from the group commit (``append_now``): no
    request queued, no batch run. An append with a command id still goes through a batch."""
    fast, _ = logs
    group = fast._group
    batches: list[int] = []
    run_batch = group._run_batch

    def counted(gather: Any) -> None:
        batches.append(1)
        run_batch(gather)

    monkeypatch.setattr(group, "_run_batch", counted)
    fast.append("ticket:a", 0, [TicketOpened(title="a")])
    fast.append("ticket:a", 1, [TicketNoted(text="b")])
    assert batches == []
    fast.append("ticket:a", 2, [TicketNoted(text="c")], command_id="cmd-1")
    assert batches == [1]
    assert [e.version for e in fast.read_stream("ticket:a")] == [1, 2, 3]


def test_the_lead_taken_alone_waits_for_no_one_and_passes_to_who_queued() -> None:
    """``GroupCommit.try_lead_alone`` refuses while another leads, and while the writers of a
    batch of several are on their way back; ``hand_over`` makes a caller that queued meanwhile
    the leader of the next batch."""
    ran: list[list[str | None]] = []
    group = GroupCommit(lambda gather: ran.append([r.stream_id for r in gather()]), max_batch=16)
    assert group.try_lead_alone()
    assert not group.try_lead_alone()  # one leader at a time
    waiter = threading.Thread(target=group.submit, args=(lambda tx: None, "ticket:queued"))
    waiter.start()
    deadline = time.monotonic() + 10
    while not group._queue and time.monotonic() < deadline:  # until it has queued
        time.sleep(0.001)
    assert ran == []  # it waits for the lead
    group.hand_over()
    waiter.join(10)
    assert not waiter.is_alive()
    assert ran == [["ticket:queued"]]
    assert group.try_lead_alone()  # the last batch had one caller: nobody to wait for
    group.hand_over()
    group._last_batch = 2  # a batch of several: its writers are on their way back
    assert not group.try_lead_alone()
