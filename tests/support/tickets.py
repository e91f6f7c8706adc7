"""A small machine of the test's own, declared the way an embedder would declare one."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from engine import LIVE, NEW, Event, MachineSpec, Projection, RecordedEvent, StreamHead, Transition


class TicketState(StrEnum):
    OPEN = "open"
    WORKING = "working"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TicketOpened(Event, tag="ticket.opened"):
    title: str = ""


class TicketStarted(Event, tag="ticket.started"):
    worker: str = ""


class TicketNoted(Event, tag="ticket.noted"):
    text: str = ""


class TicketFinished(Event, tag="ticket.finished"):
    outcome: str = "ok"


class TicketCancelled(Event, tag="ticket.cancelled"):
    reason: str = ""


def is_ok(head: StreamHead, event: Event) -> bool:
    return isinstance(event, TicketFinished) and event.outcome == "ok"


def is_error(head: StreamHead, event: Event) -> bool:
    return isinstance(event, TicketFinished) and event.outcome == "error"


TICKET = MachineSpec(
    kind="ticket",
    description="A unit of work: opened, worked on, finished once.",
    states=list(TicketState),
    initial=TicketState.OPEN,
    terminal=frozenset({TicketState.DONE, TicketState.FAILED, TicketState.CANCELLED}),
    transitions=[
        Transition(TicketOpened, NEW, TicketState.OPEN),
        Transition(TicketStarted, [TicketState.OPEN], TicketState.WORKING),
        Transition(TicketNoted, LIVE),
        Transition(TicketFinished, [TicketState.WORKING], TicketState.DONE, guard=is_ok),
        Transition(TicketFinished, [TicketState.WORKING], TicketState.FAILED, guard=is_error),
        Transition(TicketCancelled, LIVE, TicketState.CANCELLED),
    ],
)

MACHINES = [TICKET]


class TicketTitles(Projection):
    """A read model of the test's own. ``notes`` counts, so applying an event twice shows."""

    name = "ticket_titles"
    version = 1
    tables = ("ticket_titles",)
    ddl = """CREATE TABLE ticket_titles (
        stream_id TEXT PRIMARY KEY, title TEXT NOT NULL, notes INTEGER NOT NULL
    ) WITHOUT ROWID"""

    def apply(self, cursor: Any, event: RecordedEvent) -> None:
        if isinstance(event.event, TicketOpened):
            cursor.execute(
                "INSERT INTO ticket_titles VALUES (?, ?, 0)", (event.stream_id, event.event.title)
            )
        elif isinstance(event.event, TicketNoted):
            cursor.execute(
                "UPDATE ticket_titles SET notes = notes + 1 WHERE stream_id = ?", (event.stream_id,)
            )
