"""How a machine is declared (as data), built with ``transitions``, and compiled for the hot path.

A ``MachineSpec`` is module-level data: the states, the state a new stream starts in, the
terminal states, and the transitions ``(event class, sources, dest, guard)``. ``transitions``
builds it once to validate it and to draw it; the log then uses a plain dict
``(state, event_type) -> [(dest, guard), ...]`` because triggering a model costs 100x a lookup
and is not thread-safe.

Rules a declaration follows:
- ``sources=NEW`` means "the stream does not exist yet"; such an event must lead to ``initial``.
- ``sources=ANY`` is every state, ``sources=LIVE`` every non-terminal state. The three are
  members of ``Sources``, not strings, so a state may be called ``new``, ``live`` or ``any``
  without meaning one of them (ADR 0019). ``*`` and ``=`` are wildcards inside
  ``transitions``; a state with one of those names is refused.
- ``dest=None`` means the event changes no state (heartbeats, pointers, notify records).
- Several transitions may share an event and a source; the first whose guard passes wins
  (this is how a ``ticket.finished`` goes to ``done`` or ``failed``).
- A guard is a pure function ``(head, event) -> bool`` of the stream head and the event; it
  never does IO and never reads the clock.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec
from transitions import Machine as TransitionsMachine

from engine.errors import InvalidDeclaration, InvalidTransition, UnknownStreamKind
from engine.events import Event, event_type_of

KIND_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
STREAM_ID_PATTERN = re.compile(r"^([a-z][a-z0-9_]{0,31}):([A-Za-z0-9_:.@-]{1,256})$")


class Sources(enum.Enum):
    """The reserved source sets. Objects, not strings: no state name can ever equal one."""

    NEW = "the stream does not exist yet"
    ANY = "every state, terminal ones included"
    LIVE = "every non-terminal state"

    def __repr__(self) -> str:
        return self.name


NEW = Sources.NEW
"""Sources of an event that creates its stream."""

ANY = Sources.ANY
"""Sources: every state, terminal ones included."""

LIVE = Sources.LIVE
"""Sources: every non-terminal state."""

RESERVED_STATE_NAMES = frozenset({"*", "="})
"""Names ``transitions`` reads as wildcards (all states, the same state)."""

SourceSpec = Sequence[str] | str | Sources
"""A transition's sources: a list of states, one state, or a ``Sources`` member."""


class StreamHead(msgspec.Struct, frozen=True, gc=False):
    """What a guard may look at: the stream as its last event left it.

    A struct, built in C: every append makes one and a replay one per event whose transition
    has a guard (0.1 us against 0.9 us for a frozen dataclass's, measured)."""

    stream_id: str
    version: int
    state: str | None


Guard = Callable[[StreamHead, Event], bool]


@dataclass(frozen=True)
class Transition:
    """One declared way an event may move a stream."""

    event: type[Event]
    sources: SourceSpec
    dest: str | None = None
    guard: Guard | None = None


@dataclass(frozen=True)
class MachineSpec:
    """A machine declared as data. ``kind`` is the stream-id prefix (``door`` in ``door:a``)."""

    kind: str
    states: Sequence[str]
    initial: str
    terminal: frozenset[str]
    transitions: Sequence[Transition]
    description: str = ""


@dataclass(frozen=True)
class _Rule:
    dest: str | None
    guard: Guard | None


@dataclass
class Machine:
    """A built, validated machine with its compiled lookup table."""

    spec: MachineSpec
    event_classes: dict[str, type[Event]]
    table: dict[tuple[str | None, str], list[_Rule]] = field(repr=False)

    @property
    def kind(self) -> str:
        return self.spec.kind

    def is_terminal(self, state: str) -> bool:
        return state in self.spec.terminal

    def next_state(self, head: StreamHead, event: Event, event_type: str) -> str:
        """The state after ``event``, or a refusal.

        Raises:
            InvalidTransition: no declared transition from the head's state, or every guard
                refused.
        """
        rules = self.table.get((head.state, event_type))
        if rules is None:
            raise InvalidTransition(head.stream_id, head.state, event_type)
        for rule in rules:
            if rule.guard is None or rule.guard(head, event):
                return rule.dest if rule.dest is not None else head.state  # type: ignore[return-value]
        names = ", ".join(r.guard.__name__ for r in rules if r.guard is not None)
        raise InvalidTransition(head.stream_id, head.state, event_type, f"refused by {names}")

    def to_json(self) -> dict[str, Any]:
        """The declaration as JSON-ready data, in declaration order."""
        return {
            "kind": self.spec.kind,
            "description": self.spec.description,
            "states": list(self.spec.states),
            "initial": self.spec.initial,
            "terminal": sorted(self.spec.terminal),
            "transitions": [
                {
                    "event_type": event_type_of(t.event),
                    "creates_stream": t.sources is NEW,
                    "sources": _resolve_sources(self.spec, t.sources),
                    "dest": t.dest,
                    "guard": t.guard.__name__ if t.guard else None,
                }
                for t in self.spec.transitions
            ],
        }

    def to_mermaid(self) -> str:
        """A Mermaid ``stateDiagram-v2`` drawn by transitions' GraphMachine."""
        # Imported here: transitions' extensions pull in asyncio, which every process that
        # imports the engine (each ``foldline`` command, each server) would pay for a diagram
        # only ``foldline machines`` draws.
        from transitions.extensions.diagrams import GraphMachine

        class _Scratch:
            pass

        scratch = _Scratch()
        GraphMachine(
            model=scratch,
            states=list(self.spec.states),
            initial=self.spec.initial,
            transitions=_transitions_rows(self.spec),
            auto_transitions=False,
            graph_engine="mermaid",
            show_conditions=True,
            title=f"{self.spec.kind} machine",
        )
        lines = [
            line
            for line in scratch.get_graph().source.splitlines()  # type: ignore[attr-defined]
            # The styling lines mark the scratch model's current state; they say nothing
            # about the declaration and would make the output depend on it.
            if not line.lstrip().startswith(("Class ", "classDef "))
        ]
        lines += [f"  {state} --> [*]" for state in self.spec.states if state in self.spec.terminal]
        return "\n".join(line for line in lines if line.strip()) + "\n"


def _resolve_sources(spec: MachineSpec, sources: SourceSpec) -> list[str]:
    """The declared states a transition leaves from; empty for ``NEW``. Compared by identity,
    so a state named ``live`` is only ever that state."""
    if sources is NEW:
        return []
    if sources is ANY:
        return list(spec.states)
    if sources is LIVE:
        return [s for s in spec.states if s not in spec.terminal]
    if isinstance(sources, str):
        return [sources]
    return list(sources)  # type: ignore[arg-type]


def _transitions_rows(spec: MachineSpec) -> list[dict[str, Any]]:
    """Rows for transitions.Machine. Creation events are the diagram's ``[*] --> initial``."""
    rows = []
    for t in spec.transitions:
        sources = _resolve_sources(spec, t.sources)
        if not sources:
            continue
        row: dict[str, Any] = {"trigger": event_type_of(t.event), "source": sources, "dest": t.dest}
        if t.guard is not None:
            row["conditions"] = [t.guard.__name__]
        rows.append(row)
    return rows


def _plain(spec: MachineSpec) -> MachineSpec:
    """The spec with every state as a plain ``str``: StrEnum members would reach transitions,
    which names Enum states by member name rather than by value."""

    def sources(value: SourceSpec) -> SourceSpec:
        if isinstance(value, Sources):
            return value
        if isinstance(value, str):
            return (str(value),)
        # A Sources member inside a list is kept as it is, for _problems to name it.
        return tuple(s if isinstance(s, Sources) else str(s) for s in value)

    def state(value: Any) -> Any:
        return str(value) if isinstance(value, str) else value

    return replace(
        spec,
        states=tuple(state(s) for s in spec.states),
        initial=state(spec.initial),
        terminal=frozenset(state(s) for s in spec.terminal),
        transitions=tuple(
            replace(t, sources=sources(t.sources), dest=None if t.dest is None else state(t.dest))
            for t in spec.transitions
        ),
    )


def _state_name_problems(states: Sequence[Any]) -> list[str]:
    """A state is a non-empty string that ``transitions`` does not read as a wildcard."""
    problems = []
    for state in states:
        if isinstance(state, Sources):
            problems.append(f"{state!r} is a source set, not a state")
        elif not isinstance(state, str) or not state:
            problems.append(f"state {state!r} must be a non-empty string")
        elif state in RESERVED_STATE_NAMES:
            problems.append(f"state {state!r} is a reserved name ({sorted(RESERVED_STATE_NAMES)})")
    return problems


def build_machine(spec: MachineSpec) -> Machine:
    """Validate a declaration, build it with transitions, and compile its lookup table.

    Raises:
        InvalidDeclaration: bad kind, unknown states, creation not leading to ``initial``,
            an event class without a dotted tag, or one tag used by two classes.
    """
    spec = _plain(spec)
    if not KIND_PATTERN.match(spec.kind):
        raise InvalidDeclaration(f"machine kind {spec.kind!r} must match {KIND_PATTERN.pattern}")
    states = list(spec.states)
    known = set(states)
    problems = _state_name_problems(states)
    if len(known) != len(states):
        problems.append("states are listed twice")
    if spec.initial not in known:
        problems.append(f"initial state {spec.initial!r} is not a state")
    problems += [f"terminal state {s!r} is not a state" for s in sorted(spec.terminal - known)]
    classes: dict[str, type[Event]] = {}
    creation: list[_Rule] = []
    for t in spec.transitions:
        event_type = event_type_of(t.event)
        if classes.setdefault(event_type, t.event) is not t.event:
            problems.append(f"{event_type} is the tag of two classes")
        sources = _resolve_sources(spec, t.sources)
        problems += [
            f"{event_type}: {s!r} must be the whole sources, not one of them"
            if isinstance(s, Sources)
            else f"{event_type}: source {s!r} is not a state"
            for s in sources
            if s not in known
        ]
        if t.dest is not None and t.dest not in known:
            problems.append(f"{event_type}: destination {t.dest!r} is not a state")
        if t.sources is not NEW and not sources and not isinstance(t.sources, Sources):
            problems.append(f"{event_type}: sources are empty (a creation event says NEW)")
        if t.sources is NEW:
            if t.dest != spec.initial:
                problems.append(f"{event_type} creates the stream, so it must lead to initial")
            creation.append(_Rule(t.dest, t.guard))
    if not creation:
        problems.append("no transition creates the stream (sources=NEW)")
    guard_names: dict[str, Guard] = {}
    for t in spec.transitions:
        if t.guard is not None and guard_names.setdefault(t.guard.__name__, t.guard) is not t.guard:
            problems.append(f"two different guards are named {t.guard.__name__!r}")
    if problems:
        raise InvalidDeclaration(f"machine {spec.kind!r}: " + "; ".join(problems), kind=spec.kind)

    built = TransitionsMachine(
        model=None,
        states=states,
        initial=spec.initial,
        transitions=_transitions_rows(spec),
        auto_transitions=False,
        ignore_invalid_triggers=False,
    )
    guards = {t.guard.__name__: t.guard for t in spec.transitions if t.guard is not None}
    table: dict[tuple[str | None, str], list[_Rule]] = {}
    for event_type, trigger in built.events.items():
        for source, rows in trigger.transitions.items():
            table[(source, event_type)] = [
                _Rule(row.dest, guards[str(row.conditions[0].func)] if row.conditions else None)
                for row in rows
            ]
    for t in spec.transitions:
        if t.sources is NEW:
            table.setdefault((None, event_type_of(t.event)), []).append(_Rule(t.dest, t.guard))
    return Machine(spec=spec, event_classes=classes, table=table)


# Stream ids whose machine ``Machines.for_stream`` keeps (a bounded cache, emptied when full).
STREAM_CACHE_SIZE = 8192


class Machines:
    """The machines a log knows, by stream kind."""

    def __init__(self, specs: Iterable[MachineSpec]) -> None:
        self.by_kind: dict[str, Machine] = {}
        self.event_classes: dict[str, type[Event]] = {}
        for spec in specs:
            if spec.kind in self.by_kind:
                raise InvalidDeclaration(f"two machines declare kind {spec.kind!r}")
            machine = build_machine(spec)
            for event_type, cls in machine.event_classes.items():
                if event_type in self.event_classes:
                    raise InvalidDeclaration(f"{event_type} is declared by two machines")
                self.event_classes[event_type] = cls
            self.by_kind[spec.kind] = machine
        # Stream ids already matched, with their machine: every append asks, and the pattern
        # match costs more than the rest of the lookup. Emptied when full, so it stays bounded.
        self._by_stream: dict[str, Machine] = {}

    def for_stream(self, stream_id: str) -> Machine:
        """The machine of a stream id ``kind:id``.

        Raises:
            UnknownStreamKind: malformed id, or no machine for its kind.
        """
        known = self._by_stream.get(stream_id) if type(stream_id) is str else None
        if known is not None:
            return known
        match = STREAM_ID_PATTERN.match(stream_id) if isinstance(stream_id, str) else None
        if match is None:
            raise UnknownStreamKind(
                f"stream id {stream_id!r} must look like kind:id "
                f"(pattern {STREAM_ID_PATTERN.pattern})",
                stream_id=stream_id,
            )
        machine = self.by_kind.get(match.group(1))
        if machine is None:
            raise UnknownStreamKind(
                f"no machine is declared for stream kind {match.group(1)!r}", stream_id=stream_id
            )
        if len(self._by_stream) >= STREAM_CACHE_SIZE:
            self._by_stream.clear()
        self._by_stream[stream_id] = machine
        return machine
