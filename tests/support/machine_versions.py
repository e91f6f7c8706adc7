"""Later releases of docs/embedding.md's door (``tests.support.doors``) and of the built-in
lease, for the tests of recorded declarations, upcasting and the replay check (ADR 0060,
ADR 0061).

- ``DOOR_LOCKING``: a compatible change: a new state and event, every old transition kept.
- ``DOOR_NO_CLOSING``: a breaking change: a door can no longer be closed once open (the old
  ``door.closed`` from ``open`` is refused).
- ``DOOR_RENAMED``: ``door.opened`` replaced by ``door.swung_open`` whose ``who`` was ``by``,
  with the upcaster that reads the old tag (registered when this module is imported).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine import NEW, Event, MachineSpec, StreamHead, Transition
from engine.domain.lease import LEASE, LeaseReleased
from engine.events import upcaster
from engine.projection import DispatchProjection, handles
from tests.support.doors import DOOR, DoorClosed, DoorInstalled, DoorOpened, DoorsProjection


class DoorLocked(Event, tag="door.locked"):
    pass


DOOR_LOCKING = MachineSpec(
    kind="door",
    states=["closed", "open", "locked"],
    initial="closed",
    terminal=frozenset(),
    transitions=[*DOOR.transitions, Transition(DoorLocked, ["closed"], "locked")],
)

DOOR_NO_CLOSING = MachineSpec(
    kind="door",
    states=["closed", "open"],
    initial="closed",
    terminal=frozenset(),
    transitions=[
        Transition(DoorInstalled, NEW, "closed"),
        Transition(DoorOpened, ["closed"], "open"),
    ],
)


def is_opened_by_someone(head: StreamHead, event: Event) -> bool:
    """A guard only this module has: a door is opened by someone named."""
    return bool(getattr(event, "by", ""))


DOOR_NAMED = MachineSpec(
    kind="door",
    states=["closed", "open"],
    initial="closed",
    terminal=frozenset(),
    transitions=[
        replace(t, guard=is_opened_by_someone) if t.event is DoorOpened else t
        for t in DOOR.transitions
    ],
)
"""The door with a guard on opening, for a recorded guard the code later lacks."""


class DoorSwungOpen(Event, tag="door.swung_open"):
    who: str


@upcaster("door.opened", to=DoorSwungOpen)
def door_opened_became_swung_open(payload: dict[str, Any]) -> dict[str, Any]:
    """``door.opened {by}`` is ``door.swung_open {who}`` since the door's second release."""
    return {"who": payload.get("by", "")}


DOOR_RENAMED = MachineSpec(
    kind="door",
    states=["closed", "open"],
    initial="closed",
    terminal=frozenset(),
    transitions=[
        Transition(DoorInstalled, NEW, "closed"),
        Transition(DoorSwungOpen, ["closed"], "open"),
        Transition(DoorClosed, ["open"], "closed"),
    ],
)


class DoorOpenersProjection(DispatchProjection):
    """Who last opened each door: folded from ``door.swung_open``, so from every old
    ``door.opened`` only through its upcaster."""

    name = "door_openers"
    version = 1
    tables = ("door_openers",)
    ddl = "CREATE TABLE door_openers (door_id TEXT PRIMARY KEY, who TEXT NOT NULL)"

    @handles(DoorSwungOpen)
    def on_door_swung_open(self, cur: Any, e: Any) -> None:
        cur.execute(
            "INSERT OR REPLACE INTO door_openers VALUES (?, ?)", (e.stream_id[5:], e.event.who)
        )


LOCKING = [DOOR_LOCKING, DoorsProjection]
NO_CLOSING = [DOOR_NO_CLOSING]
RENAMED = [DOOR_RENAMED, DoorOpenersProjection]


def lease_is_kept(head: StreamHead, event: Event) -> bool:
    """The revision's rule: a lease once held is never released (every release refused)."""
    return False


LEASE_KEPT = MachineSpec(
    kind="lease",
    description="A revision of the built-in lease: a lease once held is never released.",
    states=list(LEASE.states),
    initial=LEASE.initial,
    terminal=LEASE.terminal,
    transitions=[
        replace(t, guard=lease_is_kept) if t.event is LeaseReleased else t
        for t in LEASE.transitions
    ],
)
"""A breaking revision of a built-in machine, for a server run: the ``lease.released`` a
graceful stop of the run before recorded is refused by it."""
