"""Events, the recorded envelope, and the codec between them and stored bytes.

An event is a frozen msgspec Struct whose tag is its ``event_type`` (a dotted, lowercase,
never-changing name such as ``door.opened``). Stored events are decoded leniently (unknown
fields are ignored) so that an older reader survives a newer writer; new fields must therefore
always have defaults.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from engine.errors import InvalidDeclaration, InvalidEvent, PayloadTooLarge, UnknownEventType

EVENT_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event. Subclasses declare ``tag="kind.happened"``."""


def event_type_of(cls: type[Event]) -> str:
    """The declared tag of an event class.

    Raises:
        InvalidDeclaration: the class has no explicit dotted tag.
    """
    tag = cls.__struct_config__.tag
    if not isinstance(tag, str) or not EVENT_TYPE_PATTERN.match(tag):
        raise InvalidDeclaration(
            f"{cls.__name__} needs an explicit dotted tag such as tag='door.opened', got {tag!r}",
            event_class=cls.__name__,
        )
    return tag


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """Where, when and under what the log holds an event: the columns every stored event has,
    in the ``events`` table's order (what reads of events, on any surface, start from)."""

    position: int
    stream_id: str
    version: int
    event_type: str
    recorded_at: str
    epoch: int
    command_id: str | None
    state: str


class RecordedEvent(Envelope, frozen=True, kw_only=True):
    """An event as the log holds it: the envelope columns plus the decoded event."""

    event: Event
    hash: str

    @classmethod
    def from_row(cls, row: Sequence[Any], event: Event) -> RecordedEvent:
        """The envelope of a stored ``events`` row (``engine.chain.Row`` order: position,
        stream_id, version, event_type, recorded_at, epoch, command_id, state, payload, hash;
        columns after those are ignored) around ``event``, its payload decoded by the caller
        (``EventCodec.decode``) or the event the writer encoded into it: the one place the
        columns become an envelope."""
        return cls(
            position=row[0],
            stream_id=row[1],
            version=row[2],
            event_type=row[3],
            recorded_at=row[4],
            epoch=row[5],
            command_id=row[6],
            state=row[7],
            event=event,
            hash=row[9].hex(),
        )


class EventCodec:
    """Encodes and decodes the events of a set of declared classes.

    Decoding picks the decoder by the stored ``event_type`` column, which is faster than a
    tagged-union decoder and lets unknown types fail with a clear error.
    """

    def __init__(self, classes: dict[str, type[Event]], max_payload_bytes: int) -> None:
        self._classes = dict(classes)
        self._decoders = {tag: msgspec.json.Decoder(cls) for tag, cls in classes.items()}
        self._encoder = msgspec.json.Encoder()
        self.max_payload_bytes = max_payload_bytes

    def encode(self, event: Event) -> tuple[str, bytes]:
        """Validate and encode an event for storage; returns ``(event_type, payload)``.

        msgspec does not check field types on construction, so the payload is decoded again
        with the strict typed decoder: that is where wrong types and constraints are caught.

        Raises:
            InvalidEvent: not an Event, or a field does not match its declaration.
            UnknownEventType: the class is not declared in any machine.
            PayloadTooLarge: the encoded event exceeds ``max_payload_bytes``.
        """
        if not isinstance(event, Event):
            raise InvalidEvent(
                f"expected an Event, got {type(event).__name__}", got=type(event).__name__
            )
        event_type = type(event).__struct_config__.tag
        if not isinstance(event_type, str) or self._classes.get(event_type) is not type(event):
            raise UnknownEventType(
                f"event class {type(event).__name__} ({event_type!r}) is not declared",
                event_type=event_type,
            )
        try:
            payload = self._encoder.encode(event)
        except (TypeError, ValueError) as ex:
            raise InvalidEvent(f"{event_type}: {ex}", event_type=event_type) from ex
        if len(payload) > self.max_payload_bytes:
            raise PayloadTooLarge(
                f"{event_type}: payload of {len(payload)} bytes exceeds {self.max_payload_bytes}",
                event_type=event_type,
                size=len(payload),
                limit=self.max_payload_bytes,
            )
        try:
            self._decoders[event_type].decode(payload)
        except msgspec.ValidationError as ex:
            raise InvalidEvent(f"{event_type}: {ex}", event_type=event_type) from ex
        return event_type, payload

    def decode(self, event_type: str, payload: bytes) -> Event:
        """Decode a stored payload.

        Raises:
            UnknownEventType: the type is not declared by this codec.
            InvalidEvent: the payload does not decode as its type.
        """
        decoder = self._decoders.get(event_type)
        if decoder is None:
            raise UnknownEventType(f"unknown event type {event_type!r}", event_type=event_type)
        try:
            event: Event = decoder.decode(payload)
        except msgspec.DecodeError as ex:
            raise InvalidEvent(f"{event_type}: {ex}", event_type=event_type) from ex
        return event
