"""docs/embedding.md's door: a machine and a read model a user declares in a package of their own.

The generic-engine tests import it; the audit tests copy this file into a folder of its own
(``doors.py`` beside a distribution whose ``foldline.machines`` entry point names it), so the
CLI finds it the way it finds an installed package."""

from __future__ import annotations

from typing import Any

from engine import NEW, Event, MachineSpec, Transition
from engine.projection import DispatchProjection, handles


class DoorInstalled(Event, tag="door.installed"):
    where: str = ""


class DoorOpened(Event, tag="door.opened"):
    by: str = ""


class DoorClosed(Event, tag="door.closed"):
    pass


DOOR = MachineSpec(
    kind="door",
    states=["closed", "open"],
    initial="closed",
    terminal=frozenset(),
    transitions=[
        Transition(DoorInstalled, NEW, "closed"),
        Transition(DoorOpened, ["closed"], "open"),
        Transition(DoorClosed, ["open"], "closed"),
    ],
)


class DoorsProjection(DispatchProjection):
    name = "doors"
    version = 1
    tables = ("doors",)
    ddl = "CREATE TABLE doors (door_id TEXT PRIMARY KEY, state TEXT NOT NULL, opened INT)"

    @handles(DoorInstalled)
    def on_door_installed(self, cur: Any, e: Any) -> None:
        cur.execute("INSERT INTO doors VALUES (?, ?, 0)", (e.stream_id[5:], e.state))

    @handles(DoorOpened)
    def on_door_opened(self, cur: Any, e: Any) -> None:
        cur.execute(
            "UPDATE doors SET state = ?, opened = opened + 1 WHERE door_id = ?",
            (e.state, e.stream_id[5:]),
        )

    @handles(DoorClosed)
    def on_door_closed(self, cur: Any, e: Any) -> None:
        cur.execute("UPDATE doors SET state = ? WHERE door_id = ?", (e.state, e.stream_id[5:]))


DECLARATIONS = [DOOR, DoorsProjection]
