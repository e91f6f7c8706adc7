"""Projection handlers are registered by event class and checked when the log opens: a
handler that can never fire is an error, never silence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine import (
    DispatchProjection,
    Event,
    InvalidDeclaration,
    RecordedEvent,
    handles,
    open_log,
)
from tests.support.tickets import MACHINES, TicketNoted, TicketOpened


class NoteCount(DispatchProjection):
    name = "note_count"
    version = 1
    tables = ("note_count",)
    ddl = "CREATE TABLE note_count (stream_id TEXT PRIMARY KEY, notes INTEGER NOT NULL)"

    @handles(TicketOpened)
    def opened(self, cur: Any, e: RecordedEvent) -> None:
        cur.execute("INSERT INTO note_count VALUES (?, 0)", (e.stream_id,))

    @handles(TicketNoted)
    def noted(self, cur: Any, e: RecordedEvent) -> None:
        cur.execute("UPDATE note_count SET notes = notes + 1 WHERE stream_id = ?", (e.stream_id,))


class Elsewhere(Event, tag="elsewhere.happened"):
    pass


class ForeignHandler(NoteCount):
    name = "foreign"

    @handles(Elsewhere)
    def elsewhere(self, cur: Any, e: RecordedEvent) -> None:
        raise AssertionError("never folded: the log refuses to open")


class LookAlike(Event, tag="ticket.noted"):  # the same tag as TicketNoted, another class
    pass


class LookAlikeHandler(DispatchProjection):
    name = "look_alike"
    version = 1
    tables = ()
    ddl = ""

    @handles(LookAlike)
    def noted(self, cur: Any, e: RecordedEvent) -> None:
        raise AssertionError("never folded: the log refuses to open")


def test_projection_registered_handlers_fold_their_events(tmp_path: Path) -> None:
    log = open_log(tmp_path / "notes.db", MACHINES, [NoteCount()])
    log.append("ticket:1", 0, [TicketOpened(title="a"), TicketNoted(text="x"), TicketNoted()])
    rows = log.connection().execute("SELECT stream_id, notes FROM note_count").fetchall()
    assert rows == [("ticket:1", 2)]
    assert NoteCount().handled_events() == {
        "ticket.opened": TicketOpened,
        "ticket.noted": TicketNoted,
    }
    assert log.rebuild() == log.content_hash()
    log.close()


@pytest.mark.parametrize(
    ("projection", "message"),
    [
        (ForeignHandler(), "foreign handles elsewhere.happened, which no machine declares"),
        (LookAlikeHandler(), "look_alike handles ticket.noted as LookAlike, but the machines"),
    ],
)
def test_projection_handler_for_an_undeclared_event_fails_at_open(
    tmp_path: Path, projection: DispatchProjection, message: str
) -> None:
    path = tmp_path / "refused.db"
    with pytest.raises(InvalidDeclaration, match=message):
        open_log(path, MACHINES, [projection])
    assert not path.exists()  # refused before the file was created


def test_projection_handler_named_by_the_old_convention_is_refused() -> None:
    with pytest.raises(InvalidDeclaration, match="on_ticket_noted is not registered"):

        class Mangled(DispatchProjection):  # a typo here used to be silently ignored
            def on_ticket_noted(self, cur: Any, e: RecordedEvent) -> None:
                pass


def test_projection_one_event_handled_twice_is_refused() -> None:
    with pytest.raises(InvalidDeclaration, match="handled by both"):

        class Twice(DispatchProjection):
            @handles(TicketNoted)
            def first(self, cur: Any, e: RecordedEvent) -> None:
                pass

            @handles(TicketNoted)
            def second(self, cur: Any, e: RecordedEvent) -> None:
                pass


def test_projection_handles_needs_tagged_event_classes() -> None:
    with pytest.raises(InvalidDeclaration, match="at least one"):
        handles()

    class Untagged(Event):
        pass

    with pytest.raises(InvalidDeclaration, match="tag"):
        handles(Untagged)


class MoreNotes(NoteCount):
    """Inherits ``NoteCount``'s handlers and adds one: the append path must see all three."""

    name = "more_notes"
    tables = ("more_notes",)
    ddl = "CREATE TABLE more_notes (stream_id TEXT PRIMARY KEY, notes INTEGER NOT NULL)"

    @handles(TicketOpened)
    def opened(self, cur: Any, e: RecordedEvent) -> None:
        cur.execute("INSERT INTO more_notes VALUES (?, 0)", (e.stream_id,))

    @handles(TicketNoted)
    def noted(self, cur: Any, e: RecordedEvent) -> None:
        cur.execute("UPDATE more_notes SET notes = notes + 1 WHERE stream_id = ?", (e.stream_id,))


def test_projection_handlers_are_what_the_append_path_routes(tmp_path: Path) -> None:
    """The append calls a projection's ``apply`` only for the types its folder declares
    (``Folder.event_types``): for a ``@handles`` projection those are its handlers' types, so
    a registered handler is never skipped on append, nor on a rebuild."""
    log = open_log(tmp_path / "routes.db", MACHINES, [NoteCount(), MoreNotes()])
    for projection in log.projections.projections[1:]:
        handled = frozenset(projection.handled_events() or {})
        assert projection.folder(None).event_types == handled
        for event_type in handled:
            assert projection in log.folding(event_type)
    log.append("ticket:1", 0, [TicketOpened(title="a"), TicketNoted(text="x")])
    log.append("ticket:1", 2, [TicketNoted()])
    for table in ("note_count", "more_notes"):
        rows = log.connection().execute(f"SELECT stream_id, notes FROM {table}").fetchall()
        assert rows == [("ticket:1", 2)], table
    assert log.rebuild() == log.content_hash()
    log.close()
