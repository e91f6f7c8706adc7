"""Upcasters as data (ADR 0061): given the bytes an older release stored, the codec hands
back the event as it is today; without an upcaster the old bytes do not decode."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine.errors import InvalidDeclaration, InvalidEvent, UnknownEventType
from engine.events import Event, EventCodec, forget_upcaster, upcaster
from tests.support.machine_versions import DoorSwungOpen


class PanelMoved(Event, tag="panel.moved"):
    to: str  # was ``where`` in the first release


@pytest.fixture
def moved_where() -> Iterator[None]:
    @upcaster("panel.moved")
    def panel_moved_where_is_to(payload: dict[str, Any]) -> dict[str, Any]:
        if "where" in payload:
            payload["to"] = payload.pop("where")
        return payload

    yield
    forget_upcaster("panel.moved")


# stored tag, stored bytes -> the event read today
CASES = [
    ("door.opened", b'{"type":"door.opened","by":"ann"}', DoorSwungOpen(who="ann")),
    ("door.opened", b'{"type":"door.opened"}', DoorSwungOpen(who="")),
    ("panel.moved", b'{"type":"panel.moved","where":"hall"}', PanelMoved(to="hall")),
    ("panel.moved", b'{"type":"panel.moved","to":"yard"}', PanelMoved(to="yard")),
]


@pytest.mark.parametrize(("tag", "stored", "expected"), CASES)
def test_upcasting_old_bytes_decode_as_todays_event(
    moved_where: None, tag: str, stored: bytes, expected: Event
) -> None:
    codec = EventCodec({"door.swung_open": DoorSwungOpen, "panel.moved": PanelMoved}, 1 << 20)
    assert codec.decode(tag, stored) == expected
    row = (7, "x:1", 1, tag, "2026-01-01T00:00:00.000000Z", 0, None, "s", stored, b"\0")
    recorded = codec.recorded(row)
    assert (recorded.event, recorded.event_type) == (expected, expected.__struct_config__.tag)
    assert codec.stored_as(frozenset({"door.swung_open"})) == {"door.swung_open", "door.opened"}


def test_upcasting_without_an_upcaster_the_old_shape_is_refused() -> None:
    codec = EventCodec({"panel.moved": PanelMoved}, 1 << 20)
    with pytest.raises(InvalidEvent):
        codec.decode("panel.moved", b'{"type":"panel.moved","where":"hall"}')
    with pytest.raises(UnknownEventType):  # the upcaster's target is not this codec's
        codec.decode("door.opened", b'{"type":"door.opened","by":"ann"}')


def test_upcasting_refuses_a_second_upcaster_and_words_a_failing_one(moved_where: None) -> None:
    with pytest.raises(InvalidDeclaration):
        upcaster("panel.moved")(lambda payload: payload)
    codec = EventCodec({"panel.moved": PanelMoved}, 1 << 20)
    with pytest.raises(InvalidEvent, match=r"panel\.moved"):
        codec.decode("panel.moved", b"[1, 2]")
