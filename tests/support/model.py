"""A tiny in-memory model of the log's contract, to run the same suite against."""

from __future__ import annotations

from collections.abc import Sequence

from engine import (
    AppendResult,
    ConcurrencyError,
    Event,
    InvalidArgument,
    Machines,
    MachineSpec,
    StreamHead,
)


class ModelLog:
    """The log's observable behaviour with lists and dicts: no SQL, no chain, no projections."""

    def __init__(self, machines: Sequence[MachineSpec]) -> None:
        self.machines = Machines(machines)
        self.events: list[tuple[str, int, str, str, Event]] = []  # stream, version, type, state
        self.commands: dict[str, AppendResult] = {}
        self.heads: dict[str, StreamHead] = {}

    def append(
        self,
        stream_id: str,
        expected_version: int,
        events: Sequence[Event],
        command_id: str | None = None,
    ) -> AppendResult:
        if isinstance(expected_version, bool) or not isinstance(expected_version, int):
            raise InvalidArgument("expected_version must be an int")
        if expected_version < 0:
            raise InvalidArgument("expected_version must be >= 0")
        if not isinstance(events, (list, tuple)) or not events:
            raise InvalidArgument("events must be a non-empty list")
        machine = self.machines.for_stream(stream_id)
        codec_types = [self._encode(e) for e in events]
        if command_id is not None and command_id in self.commands:
            first = self.commands[command_id]
            return AppendResult(**{**_fields(first), "duplicate": True})
        head = self.heads.get(stream_id, StreamHead(stream_id, 0, None))
        if head.version != expected_version:
            raise ConcurrencyError(stream_id, expected_version, head.version)
        staged = []
        for event, event_type in zip(events, codec_types, strict=True):
            state = machine.next_state(head, event, event_type)
            head = StreamHead(stream_id, head.version + 1, state)
            staged.append((stream_id, head.version, event_type, state, event))
        first_position = len(self.events) + 1
        self.events.extend(staged)
        self.heads[stream_id] = head
        result = AppendResult(
            stream_id=stream_id,
            first_version=staged[0][1],
            last_version=head.version,
            first_position=first_position,
            last_position=len(self.events),
            state=head.state or "",
        )
        if command_id is not None:
            self.commands[command_id] = result
        return result

    def _encode(self, event: Event) -> str:
        from engine.events import EventCodec

        return EventCodec(self.machines.event_classes, 1 << 20).encode(event)[0]

    def read_stream(self, stream_id: str, after_version: int = 0) -> list[tuple[int, str, str]]:
        return [
            (version, event_type, state)
            for stream, version, event_type, state, _ in self.events
            if stream == stream_id and version > after_version
        ]

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[tuple[int, str, int]]:
        return [
            (position, stream, version)
            for position, (stream, version, *_rest) in enumerate(self.events, start=1)
            if position > after_position
        ][:limit]

    def head(self) -> int:
        return len(self.events)


def _fields(result: AppendResult) -> dict[str, object]:
    return {f: getattr(result, f) for f in result.__struct_fields__}
