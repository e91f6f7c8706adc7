"""One contract, every implementation: the log on each storage backend, and a tiny model.

The model is obviously right; the log must behave the same way for every call here, on every
backend of the storage seam (``tests.support.backends``: SQLite and PostgreSQL), and on the toy
backend made of the seam's protocols alone (``tests.support.toy_storage``, ADR 0032).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import (
    ConcurrencyError,
    Event,
    FencedOut,
    InvalidArgument,
    InvalidEvent,
    InvalidTransition,
    Log,
    PayloadTooLarge,
    UnknownEventType,
    UnknownStreamKind,
)
from engine.log import open_log_with
from tests.support.backends import BACKENDS
from tests.support.batches import one_batch
from tests.support.model import ModelLog
from tests.support.tickets import (
    MACHINES,
    TicketCancelled,
    TicketFinished,
    TicketNoted,
    TicketOpened,
    TicketStarted,
    TicketTitles,
)
from tests.support.toy_storage import toy_storage

# Every backend the suite holds the log to: the real ones, and the toy.
CONTRACT_BACKENDS = {**BACKENDS, "toy": toy_storage}


class RealLogView:
    """The real log, with reads shaped like the model's."""

    def __init__(self, log: Log) -> None:
        self.log = log

    def append(self, *args: Any, **kwargs: Any) -> Any:
        return self.log.append(*args, **kwargs)

    def read_stream(self, stream_id: str, after_version: int = 0) -> list[tuple[int, str, str]]:
        return [
            (e.version, e.event_type, e.state)
            for e in self.log.read_stream(stream_id, after_version)
        ]

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[tuple[int, str, int]]:
        return [
            (e.position, e.stream_id, e.version) for e in self.log.read_all(after_position, limit)
        ]

    def head(self) -> int:
        return self.log.head()


@pytest.fixture(params=[*CONTRACT_BACKENDS, "model"])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "model":
        yield ModelLog(MACHINES)
        return
    storage = CONTRACT_BACKENDS[request.param](tmp_path)
    log = open_log_with(storage, MACHINES, [TicketTitles()])
    yield RealLogView(log)
    log.close()


class Unrelated(Event, tag="other.happened"):
    pass


def test_log_append_returns_positions_and_state(subject: Any) -> None:
    first = subject.append("ticket:a", 0, [TicketOpened(title="a"), TicketStarted()])
    second = subject.append("ticket:b", 0, [TicketOpened()])
    assert (first.first_position, first.last_position, first.last_version) == (1, 2, 2)
    assert first.state == "working" and not first.duplicate
    assert (second.first_position, second.first_version, second.state) == (3, 1, "open")
    assert subject.head() == 3


def test_log_read_stream_returns_versions_in_order_after_a_version(subject: Any) -> None:
    subject.append("ticket:a", 0, [TicketOpened(), TicketStarted()])
    subject.append("ticket:b", 0, [TicketOpened()])
    subject.append("ticket:a", 2, [TicketNoted(text="x"), TicketFinished(outcome="error")])
    assert subject.read_stream("ticket:a") == [
        (1, "ticket.opened", "open"),
        (2, "ticket.started", "working"),
        (3, "ticket.noted", "working"),
        (4, "ticket.finished", "failed"),
    ]
    assert [v for v, *_ in subject.read_stream("ticket:a", after_version=2)] == [3, 4]
    assert subject.read_stream("ticket:missing") == []


def test_log_read_all_pages_by_position(subject: Any) -> None:
    for i in range(5):
        subject.append(f"ticket:{i}", 0, [TicketOpened()])
    assert [p for p, *_ in subject.read_all(0, limit=2)] == [1, 2]
    assert [p for p, *_ in subject.read_all(2, limit=2)] == [3, 4]
    assert [p for p, *_ in subject.read_all(4)] == [5]
    assert subject.read_all(5) == []


def test_log_append_refuses_stale_expected_version(subject: Any) -> None:
    subject.append("ticket:a", 0, [TicketOpened()])
    with pytest.raises(ConcurrencyError) as caught:
        subject.append("ticket:a", 0, [TicketOpened()])
    assert (caught.value.stream_id, caught.value.expected, caught.value.actual) == (
        "ticket:a",
        0,
        1,
    )
    assert caught.value.code == "version_conflict"
    with pytest.raises(ConcurrencyError):
        subject.append("ticket:a", 5, [TicketStarted()])
    assert subject.head() == 1


def test_log_duplicate_command_returns_first_outcome_and_appends_nothing(subject: Any) -> None:
    first = subject.append("ticket:a", 0, [TicketOpened(), TicketStarted()], command_id="cmd-1")
    again = subject.append("ticket:a", 0, [TicketOpened()], command_id="cmd-1")
    assert again.duplicate and not first.duplicate
    assert (again.first_position, again.last_position, again.state) == (1, 2, "working")
    assert subject.head() == 2


def test_log_refuses_illegal_transition_and_appends_nothing(subject: Any) -> None:
    subject.append("ticket:a", 0, [TicketOpened()])
    with pytest.raises(InvalidTransition) as caught:
        subject.append("ticket:a", 1, [TicketFinished()])
    assert (caught.value.state, caught.value.event_type) == ("open", "ticket.finished")
    with pytest.raises(InvalidTransition):
        subject.append("ticket:new", 0, [TicketStarted()])
    assert subject.head() == 1


def test_log_batch_with_one_illegal_event_appends_none_of_it(subject: Any) -> None:
    with pytest.raises(InvalidTransition):
        subject.append("ticket:a", 0, [TicketOpened(), TicketStarted(), TicketStarted()])
    assert subject.head() == 0
    assert subject.read_stream("ticket:a") == []


def test_log_guard_picks_destination_and_refuses_when_none_passes(subject: Any) -> None:
    subject.append("ticket:a", 0, [TicketOpened(), TicketStarted()])
    with pytest.raises(InvalidTransition) as caught:
        subject.append("ticket:a", 2, [TicketFinished(outcome="maybe")])
    assert "is_ok" in caught.value.reason
    assert subject.append("ticket:a", 2, [TicketFinished(outcome="ok")]).state == "done"


def test_log_terminal_state_refuses_further_events(subject: Any) -> None:
    subject.append("ticket:a", 0, [TicketOpened(), TicketCancelled()])
    for event in (TicketNoted(), TicketCancelled(), TicketStarted()):
        with pytest.raises(InvalidTransition):
            subject.append("ticket:a", 2, [event])


@pytest.mark.parametrize(
    ("stream_id", "expected", "events", "error"),
    [
        ("ticket:a", -1, [TicketOpened()], InvalidArgument),
        ("ticket:a", "0", [TicketOpened()], InvalidArgument),
        ("ticket:a", True, [TicketOpened()], InvalidArgument),
        ("ticket:a", 0, [], InvalidArgument),
        ("ticket:a", 0, [{"type": "ticket.opened"}], InvalidEvent),
        ("ticket:a", 0, [Unrelated()], UnknownEventType),
        ("ticket:a", 0, [TicketOpened(title=42)], InvalidEvent),  # type: ignore[arg-type]
        ("nokind", 0, [TicketOpened()], UnknownStreamKind),
        ("door:a", 0, [TicketOpened()], UnknownStreamKind),
        ("ticket:", 0, [TicketOpened()], UnknownStreamKind),
    ],
)
def test_log_bad_input_raises_clear_error_and_appends_nothing(
    subject: Any, stream_id: Any, expected: Any, events: Any, error: type[Exception]
) -> None:
    with pytest.raises(error) as caught:
        subject.append(stream_id, expected, events)
    assert str(caught.value)
    assert subject.head() == 0


def test_log_oversized_payload_is_refused(subject: Any) -> None:
    with pytest.raises(PayloadTooLarge):
        subject.append("ticket:a", 0, [TicketOpened(title="x" * (1 << 20))])
    assert subject.head() == 0


@pytest.mark.parametrize("backend", sorted(CONTRACT_BACKENDS))
def test_log_append_requires_an_expected_version(tmp_path: Path, backend: str) -> None:
    """Only a transaction's own rules may append at the head; callers must say which version."""
    log = open_log_with(CONTRACT_BACKENDS[backend](tmp_path), MACHINES)
    with pytest.raises(InvalidArgument, match="expected_version"):
        log.append("ticket:a", None, [TicketOpened()])  # type: ignore[arg-type]
    assert log.write(lambda tx: tx.append("ticket:a", None, [TicketOpened()])).last_version == 1
    assert log.head() == 1
    log.close()


@pytest.mark.parametrize("backend", sorted(CONTRACT_BACKENDS))
def test_log_two_handles_see_each_others_commits(tmp_path: Path, backend: str) -> None:
    """Each handle keeps its tail and stream heads between batches (ADR 0021): a commit through
    another handle (another process, in production) must make it read them again."""
    first = open_log_with(CONTRACT_BACKENDS[backend](tmp_path), MACHINES)
    second = open_log_with(CONTRACT_BACKENDS[backend](tmp_path), MACHINES)
    first.append("ticket:a", 0, [TicketOpened()])
    second.append("ticket:a", 1, [TicketStarted()])
    with pytest.raises(ConcurrencyError) as refused:
        first.append("ticket:a", 1, [TicketNoted()])
    assert refused.value.actual == 2
    third = first.append("ticket:a", 2, [TicketNoted(text="after")])
    assert (third.first_position, third.last_version, third.state) == (3, 3, "working")
    assert second.append("ticket:b", 0, [TicketOpened()]).first_position == 4
    assert first.verify_chain() == [] and second.verify_chain() == []
    assert first.content_hash() == second.content_hash() == first.rebuild()
    first.close()
    second.close()


@pytest.mark.parametrize("backend", sorted(CONTRACT_BACKENDS))
def test_log_an_older_epoch_from_another_handle_is_fenced_out(tmp_path: Path, backend: str) -> None:
    """A zombie host still writing under the tenure it lost: the newer epoch another handle
    appended under refuses every write of the older one, and nothing is appended."""
    zombie = open_log_with(CONTRACT_BACKENDS[backend](tmp_path), MACHINES)
    successor = open_log_with(CONTRACT_BACKENDS[backend](tmp_path), MACHINES)
    zombie.fence(1)
    zombie.append("ticket:a", 0, [TicketOpened()])
    successor.fence(2)
    successor.append("ticket:b", 0, [TicketOpened()])
    with pytest.raises(FencedOut) as refused:
        zombie.append("ticket:a", 1, [TicketStarted()])
    assert (refused.value.fields["epoch"], refused.value.fields["current_epoch"]) == (1, 2)
    assert zombie.head() == successor.head() == 2
    assert [e.epoch for e in successor.read_all()] == [1, 2]
    zombie.close()
    successor.close()


@pytest.mark.parametrize("backend", sorted(CONTRACT_BACKENDS))
@pytest.mark.parametrize("folded", [False, True], ids=["buffered", "projection-sql"])
def test_log_shared_batch_checks_heads_it_did_not_know(
    tmp_path: Path, backend: str, folded: bool
) -> None:
    """A batch whose streams another handle wrote (so this handle has no cached heads) reads
    them from the database, and the batch's own appends come before those reads: racers on
    one stream get one winner, stale versions are refused, nothing else is disturbed."""
    projections = [TicketTitles()] if folded else []
    first = open_log_with(CONTRACT_BACKENDS[backend](tmp_path), MACHINES, projections)
    second = open_log_with(CONTRACT_BACKENDS[backend](tmp_path), MACHINES, projections)
    first.append("ticket:seen", 0, [TicketOpened()])
    second.append("ticket:old", 0, [TicketOpened()])
    second.append("ticket:old", 1, [TicketStarted()])
    for i in range(8, 16):
        second.append(f"ticket:old{i}", 0, [TicketOpened()])
    appends: list[tuple[str, int, Event]] = (
        [("ticket:old", 2, TicketNoted())] * 4  # one winner, three stale
        + [("ticket:new", 0, TicketOpened())] * 4  # one creates it, three find it made
        + [(f"ticket:old{i}", 1, TicketStarted()) for i in range(8, 12)]  # all move on
        + [(f"ticket:old{i}", 0, TicketOpened()) for i in range(12, 16)]  # exist already
    )
    commands = {8: "cmd-8", 9: "cmd-9"}  # rows with and without a command id, in one batch
    outcomes = one_batch(first, appends, commands)
    for racers, actual in ((outcomes[0:4], 3), (outcomes[4:8], 1)):
        won = [o for o in racers if not isinstance(o, Exception)]
        assert len(won) == 1, racers
        refused = [o for o in racers if isinstance(o, ConcurrencyError)]
        assert [o.actual for o in refused] == [actual] * 3, racers
    assert [o.state for o in outcomes[8:12]] == ["working"] * 4
    assert all(isinstance(o, ConcurrencyError) and o.actual == 1 for o in outcomes[12:16])
    assert first.head() == 11 + 1 + 1 + 4
    assert first.stream_head("ticket:old").version == 3
    for i, command_id in commands.items():  # recorded with the batch: the first outcome
        again = second.append(appends[i][0], 1, [TicketStarted()], command_id=command_id)
        assert again.duplicate and again.first_position == outcomes[i].first_position
    assert first.verify_chain() == [] and second.verify_chain() == []
    assert first.content_hash() == second.content_hash() == first.rebuild()
    first.close()
    second.close()
