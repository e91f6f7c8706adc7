"""The declarations a log is written under, recorded in the log itself (ADR 0060).

The machines a writer appends under (every machine's states, transitions and guard names, and
the shape of every event type they declare) are canonical JSON with a digest. When they differ
from the last ones the log recorded, the writer appends a ``log.declarations`` event on the
system stream ``log:declarations`` before its first other event, in the same transaction and
under the same epoch, so the chain and the Merkle tree cover it like any event.

An audit judges each event by the declarations in force when it was recorded: the last
``log.declarations`` event before it (``recorded_machines`` builds machines from one). Events
before a log's first declarations event are judged by the code's declarations.

What a recorded declaration cannot hold is code: a guard is recorded by name and resolves to
the current code's guard of that name (the same kind's first, then any kind's); a name the
code no longer has resolves to a guard that raises ``MissingGuard`` when it is consulted. An
event type the code no longer declares gets a class of no fields, so its legality can still be
judged (its payload decodes as nothing: no guard of the code can be asked about it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from engine.errors import InvalidDeclaration, MissingGuard
from engine.events import Event, event_type_of
from engine.machines import NEW, Guard, Machines, MachineSpec, StreamHead, Transition

SYSTEM_KIND = "log"
STREAM = "log:declarations"


class LogDeclarations(Event, tag="log.declarations", frozen=True, kw_only=True):
    """The declarations the events after this one were written under, and their digest (the
    SHA-256 of ``declarations`` as canonical JSON, ``canonical``)."""

    digest: str
    declarations: dict[str, Any]


LOG = MachineSpec(
    kind=SYSTEM_KIND,
    description="The log's own records: the declarations its events were written under.",
    states=["declared"],
    initial="declared",
    terminal=frozenset(),
    transitions=[
        Transition(LogDeclarations, NEW, "declared"),
        Transition(LogDeclarations, ["declared"]),
    ],
)

_canonical = msgspec.json.Encoder(order="sorted").encode


def canonical(value: Any) -> bytes:
    """``value`` as JSON with the keys sorted at every level: what the digest is taken of."""
    return _canonical(value)


def digest_of(declarations: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(declarations)).hexdigest()


def with_system(specs: Iterable[MachineSpec]) -> list[MachineSpec]:
    """``specs`` and the system machine ``log``.

    Raises:
        InvalidDeclaration: a spec declares the reserved kind ``log``.
    """
    specs = list(specs)
    for spec in specs:
        if spec.kind == SYSTEM_KIND and spec is not LOG:
            raise InvalidDeclaration(
                f"machine kind {SYSTEM_KIND!r} is reserved for the log's own records",
                kind=SYSTEM_KIND,
            )
    return specs if any(spec is LOG for spec in specs) else [*specs, LOG]


def _shape(schema: Any) -> Any:
    """A JSON schema without its titles and descriptions: a docstring is not a shape."""
    if isinstance(schema, dict):
        return {k: _shape(v) for k, v in schema.items() if k not in ("title", "description")}
    if isinstance(schema, list):
        return [_shape(v) for v in schema]
    return schema


def declarations_of(machines: Machines) -> dict[str, Any]:
    """Every machine but the system one, as ``foldline machines --json`` prints it (by kind),
    and every event type they declare with the shape of its payload (its JSON schema)."""
    kinds = sorted(kind for kind in machines.by_kind if kind != SYSTEM_KIND)
    built = [machines.by_kind[kind] for kind in kinds]
    events = {
        tag: _shape(msgspec.json.schema(cls))
        for machine in built
        for tag, cls in sorted(machine.event_classes.items())
    }
    return {"machines": [machine.to_json() for machine in built], "events": events}


@dataclass(frozen=True)
class Declared:
    """The code's declarations, ready to be appended: the event and its encoding."""

    digest: str
    event: LogDeclarations
    encoded: tuple[str, bytes]


def declared(machines: Machines) -> Declared:
    body = declarations_of(machines)
    event = LogDeclarations(digest=digest_of(body), declarations=body)
    return Declared(event.digest, event, ("log.declarations", msgspec.json.encode(event)))


def recorded_digest(payload: bytes) -> str | None:
    """The digest a stored ``log.declarations`` payload names (None: unreadable)."""
    try:
        return msgspec.json.decode(payload, type=LogDeclarations).digest
    except msgspec.DecodeError:
        return None


def record_if_changed(tx: Any, context: Any, epoch: int) -> None:
    """Append the code's declarations to ``log:declarations`` unless the last ones the log
    recorded have the same digest: called by the transaction (``tx``, with its
    ``BatchContext``; not imported, as they import this) before the first event of each work,
    with that event's epoch (so the same fencing applies).

    What this process last knew of the stream is kept as ``(version, digest)``; the stream's
    head as this transaction sees it says whether that is still true (another process, or an
    abandoned work, moves it), and only then is the last event read again.

    Raises:
        FencedOut: ``epoch`` is older than the log's newest (as the event after it would be).
    """
    wanted = context.declarations
    if wanted is None:
        return
    head = tx.head_of(STREAM)
    known = context.declared
    if known is None or known[0] != head.version:
        last = None
        if head.version:
            rows = context.storage.stream_rows(STREAM, head.version - 1)
            last = recorded_digest(bytes(rows[-1][8])) if rows else None
        known = context.declared = (head.version, last)
    if known[1] == wanted.digest:
        return
    machine = context.machines.for_stream(STREAM)
    tx.append_encoded(STREAM, head.version, [wanted.event], [wanted.encoded], machine, None, epoch)
    context.declared = (head.version + 1, wanted.digest)


def _missing(name: str, kind: str, position: int) -> Guard:
    def guard(head: StreamHead, event: Event) -> bool:
        raise MissingGuard(
            head.stream_id,
            head.state,
            event_type_of(type(event)),
            f"guard {name!r} of machine {kind!r}, recorded at position {position},"
            " is not in this code",
        )

    guard.__name__ = name
    return guard


def _stand_in(event_type: str) -> type[Event]:
    """A class of no fields for an event type the code no longer declares."""
    cls: type[Event] = msgspec.defstruct(  # type: ignore[assignment]
        "Recorded_" + event_type.replace(".", "_"),
        [],
        bases=(Event,),
        tag=event_type,
        frozen=True,
        kw_only=True,
    )
    return cls


def recorded_machines(declarations: dict[str, Any], code: Machines, position: int) -> Machines:
    """The machines a recorded ``log.declarations`` event declares, built with the code's
    event classes and guards (by tag, by name), plus the system machine.

    Raises:
        InvalidDeclaration: the recorded declarations are malformed.
    """
    guards: dict[str, dict[str, Guard]] = {}
    for kind, machine in code.by_kind.items():
        for t in machine.spec.transitions:
            if t.guard is not None:
                guards.setdefault(kind, {})[t.guard.__name__] = t.guard
    anywhere = {name: g for found in guards.values() for name, g in found.items()}
    stand_ins: dict[str, type[Event]] = {}
    specs = []
    try:
        for m in declarations["machines"]:
            kind = m["kind"]
            transitions = []
            for t in m["transitions"]:
                tag = t["event_type"]
                cls = code.event_classes.get(tag) or stand_ins.get(tag)
                if cls is None:
                    cls = stand_ins[tag] = _stand_in(tag)
                guard = None
                if t["guard"] is not None:
                    name = t["guard"]
                    guard = guards.get(kind, {}).get(name) or anywhere.get(name)
                    if guard is None:
                        guard = _missing(name, kind, position)
                sources: Sequence[str] | Any = NEW if t["creates_stream"] else list(t["sources"])
                transitions.append(Transition(cls, sources, t["dest"], guard))
            specs.append(
                MachineSpec(
                    kind=kind,
                    states=list(m["states"]),
                    initial=m["initial"],
                    terminal=frozenset(m["terminal"]),
                    transitions=transitions,
                    description=m.get("description", ""),
                )
            )
    except (KeyError, TypeError) as ex:
        raise InvalidDeclaration(
            f"the declarations recorded at position {position} are malformed: {ex!r}"
        ) from ex
    return Machines(with_system(specs))
