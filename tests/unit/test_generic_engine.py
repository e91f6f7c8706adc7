"""The generic command API: a machine of the user's own, their ``decide`` and their view, with
nothing of the built-in domain in the log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine import (
    Context,
    Engine,
    EngineError,
    InvalidArgument,
    InvalidTransition,
    open_log,
)
from tests.support.doors import DOOR, DoorClosed, DoorInstalled, DoorOpened


class OpenDoor(msgspec.Struct, frozen=True, kw_only=True):
    door: str
    by: str
    command_id: str | None = None


class CloseDoor(msgspec.Struct, frozen=True, kw_only=True):
    door: str
    command_id: str | None = None


DoorCommand = OpenDoor | CloseDoor


class NotAllowed(EngineError):
    code = "not_allowed"


class Keyholders:
    """The user's view: who may open doors, read inside the write transaction."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def opened_today(self, by: str) -> int:
        rows = self._cursor.execute(
            "SELECT count(*) FROM events WHERE event_type = 'door.opened'"
            " AND json_extract(payload, '$.by') = ?",
            (by,),
        ).fetchall()
        return int(rows[0][0])


class Limits(msgspec.Struct, frozen=True):
    opens_per_person: int = 2


def decide(command: DoorCommand, ctx: Context[Keyholders, Limits]) -> None:
    stream_id = f"door:{command.door}"
    if isinstance(command, OpenDoor):
        if ctx.view.opened_today(command.by) >= ctx.settings.opens_per_person:
            raise NotAllowed(f"{command.by} has opened enough doors today", by=command.by)
        if ctx.head(stream_id).state is None:  # the first use installs the door
            ctx.append(stream_id, DoorInstalled(where="unknown"))
        ctx.append(stream_id, DoorOpened(by=command.by))
    else:
        ctx.append(stream_id, DoorClosed())


@pytest.fixture
def doors(tmp_path: Path) -> Any:
    log = open_log(tmp_path / "doors.db", [DOOR], [])
    yield Engine(log, decide, Keyholders, Limits(), accepts=(OpenDoor, CloseDoor))
    log.close()


def test_generic_engine_runs_a_users_decide_and_view(doors: Any) -> None:
    first = doors.handle(OpenDoor(door="front", by="ana", command_id="c1"))
    assert (first.first_position, first.last_position, first.streams) == (1, 2, ("door:front",))
    assert doors.log.stream_head("door:front").state == "open"
    doors.handle(CloseDoor(door="front"))
    doors.handle(OpenDoor(door="front", by="ana"))
    with pytest.raises(NotAllowed) as refused:
        doors.handle(OpenDoor(door="back", by="ana"))
    assert refused.value.code == "not_allowed"
    assert doors.log.head() == 4  # the refusal appended nothing, not even the install


def test_generic_engine_repeated_command_id_answers_the_first_outcome(doors: Any) -> None:
    first = doors.handle(OpenDoor(door="front", by="ana", command_id="c1"))
    again = doors.handle(OpenDoor(door="front", by="bo", command_id="c1"))
    assert again.duplicate and (again.first_position, again.last_position) == (1, 2)
    assert doors.log.head() == first.last_position


def test_generic_engine_machine_still_refuses_and_rolls_back(doors: Any) -> None:
    doors.handle(OpenDoor(door="front", by="ana"))
    with pytest.raises(InvalidTransition):
        doors.handle(OpenDoor(door="front", by="bo"))  # already open
    assert doors.log.head() == 2


def test_generic_engine_refuses_what_it_does_not_accept(doors: Any) -> None:
    with pytest.raises(InvalidArgument, match="got dict"):
        doors.handle({"door": "front"})
    assert doors.log.head() == 0


def test_generic_engine_log_holds_no_domain_tables(doors: Any) -> None:
    tables = {
        row[0]
        for row in doors.log.connection().execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
        )
    }
    assert not tables & {"leases", "sessions", "jobs", "tasks", "runs"}
