"""Events, the recorded envelope, and the codec between them and stored bytes.

An event is a frozen msgspec Struct whose tag is its ``event_type`` (a dotted, lowercase,
never-changing name such as ``door.opened``). Stored events are decoded leniently (unknown
fields are ignored) so that an older reader survives a newer writer; new fields must therefore
always have defaults.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


Convert = Callable[[dict[str, Any]], dict[str, Any]]
"""An upcaster's conversion: a stored payload (a JSON object, ``type`` key removed) to the
shape its target type decodes today."""


@dataclass(frozen=True)
class Upcaster:
    """How payloads stored under ``event_type`` become events of ``target`` (a tag): a renamed
    tag, or (``target == event_type``) an older shape of the same tag."""

    event_type: str
    target: str
    convert: Convert


_UPCASTERS: dict[str, Upcaster] = {}


def upcaster(event_type: str, to: type[Event] | None = None) -> Callable[[Convert], Convert]:
    """Register ``convert`` (decorated) as how stored ``event_type`` payloads become the
    current shape: of the same tag (``to=None``), or of the class ``to`` when the tag was
    replaced (ADR 0005, ADR 0061). A same-tag upcaster is handed every stored payload of its
    tag, so it returns a payload already in the current shape as it is. At most one upcaster
    per stored tag; the target may itself have one (applied in turn, each at most once).

    Raises:
        InvalidDeclaration: a second upcaster for the tag, or a tag that is not dotted.
    """
    if not EVENT_TYPE_PATTERN.match(event_type):
        raise InvalidDeclaration(f"upcaster for {event_type!r}: not a dotted event type")
    target = event_type if to is None else event_type_of(to)

    def register(convert: Convert) -> Convert:
        known = _UPCASTERS.get(event_type)
        if known is not None and known.convert is not convert:
            raise InvalidDeclaration(f"{event_type} has two upcasters", event_type=event_type)
        _UPCASTERS[event_type] = Upcaster(event_type, target, convert)
        return convert

    return register


def upcasters() -> dict[str, Upcaster]:
    """Every registered upcaster, by the stored tag it reads."""
    return dict(_UPCASTERS)


def forget_upcaster(event_type: str) -> None:
    """Unregister the upcaster of ``event_type`` (tests that register one of their own)."""
    _UPCASTERS.pop(event_type, None)


_plain_decode = msgspec.json.decode
_plain_encode = msgspec.json.encode


class EventCodec:
    """Encodes and decodes the events of a set of declared classes.

    Decoding picks the decoder by the stored ``event_type`` column, which is faster than a
    tagged-union decoder and lets unknown types fail with a clear error.

    Upcasting happens here and nowhere else: a stored tag with an upcaster (``upcaster``)
    is decoded through it into its current type, every time it is read; the stored bytes, and
    so the chain and the Merkle proofs over them, never change.
    """

    def __init__(
        self,
        classes: dict[str, type[Event]],
        max_payload_bytes: int,
        upcasts: dict[str, Upcaster] | None = None,
    ) -> None:
        self._classes = dict(classes)
        self._decoders = {tag: msgspec.json.Decoder(cls) for tag, cls in classes.items()}
        self._encoder = msgspec.json.Encoder()
        self.max_payload_bytes = max_payload_bytes
        # Only the upcasters into a type this codec declares: another log's are not its own.
        self._upcasts = {
            tag: step
            for tag, step in (upcasters() if upcasts is None else upcasts).items()
            if step.target in self._classes
        }

    def plain_decoders(self) -> dict[str, Callable[[bytes], Any]]:
        """The typed decoders of the tags read without an upcaster (a replay's fast path; every
        other tag goes through ``decode``)."""
        return {tag: d.decode for tag, d in self._decoders.items() if tag not in self._upcasts}

    def stored_as(self, event_types: frozenset[str]) -> frozenset[str]:
        """``event_types`` and every stored tag an upcaster turns into one of them: what a
        read of those types must select."""
        if not self._upcasts:
            return event_types
        more = set()
        for tag in self._upcasts:
            target, seen = tag, set()
            while (step := self._upcasts.get(target)) is not None and target not in seen:
                seen.add(target)
                target = step.target
            if target in event_types:
                more.add(tag)
        return event_types | more

    def recorded(self, row: Sequence[Any]) -> RecordedEvent:
        """A stored row as its recorded event, upcast: ``event_type`` is the current tag."""
        event = self.decode(row[3], row[8])
        recorded = RecordedEvent.from_row(row, event)
        if row[3] in self._upcasts:
            tag = type(event).__struct_config__.tag
            if tag != row[3]:
                recorded = msgspec.structs.replace(recorded, event_type=tag)
        return recorded

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
        if event_type in self._upcasts:
            return self._upcast(event_type, payload)
        decoder = self._decoders.get(event_type)
        if decoder is None:
            raise UnknownEventType(f"unknown event type {event_type!r}", event_type=event_type)
        try:
            event: Event = decoder.decode(payload)
        except msgspec.DecodeError as ex:
            raise InvalidEvent(f"{event_type}: {ex}", event_type=event_type) from ex
        return event

    def _upcast(self, event_type: str, payload: bytes) -> Event:
        """Decode a stored payload through its upcasters into its current type.

        Raises:
            InvalidEvent: the payload is not a JSON object, an upcaster failed, or its result
                does not decode as the target type.
            UnknownEventType: the last target is not declared by this codec.
        """
        try:
            data = _plain_decode(payload)
        except msgspec.DecodeError as ex:
            raise InvalidEvent(f"{event_type}: {ex}", event_type=event_type) from ex
        if not isinstance(data, dict):
            raise InvalidEvent(f"{event_type}: not a JSON object", event_type=event_type)
        tag, applied = event_type, set()
        while (step := self._upcasts.get(tag)) is not None and tag not in applied:
            applied.add(tag)
            data.pop("type", None)
            try:
                data = step.convert(data)
            except Exception as ex:  # the user's conversion: say which one, and why
                raise InvalidEvent(
                    f"{event_type}: upcaster to {step.target} failed: {ex!r}",
                    event_type=event_type,
                ) from ex
            tag = step.target
        decoder = self._decoders.get(tag)
        if decoder is None:
            raise UnknownEventType(
                f"unknown event type {tag!r} (upcast from {event_type!r})", event_type=tag
            )
        try:
            event: Event = decoder.decode(_plain_encode({**data, "type": tag}))
        except msgspec.DecodeError as ex:
            raise InvalidEvent(f"{event_type} upcast to {tag}: {ex}", event_type=tag) from ex
        return event
