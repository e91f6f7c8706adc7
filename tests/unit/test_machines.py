from __future__ import annotations

import json
from collections import deque

import pytest

from engine import NEW, Event, InvalidDeclaration, Machines, MachineSpec, StreamHead, Transition
from engine.machines import ANY, LIVE, build_machine
from tests.support.tickets import TICKET, TicketFinished, TicketOpened, TicketStarted

# (state, event_type) -> allowed, for the ticket machine; None is "stream does not exist".
TICKET_TABLE = [
    (None, "ticket.opened", True),
    (None, "ticket.started", False),
    ("open", "ticket.started", True),
    ("open", "ticket.opened", False),
    ("open", "ticket.noted", True),
    ("open", "ticket.finished", False),
    ("working", "ticket.finished", True),
    ("working", "ticket.cancelled", True),
    ("done", "ticket.noted", False),
    ("done", "ticket.cancelled", False),
    ("cancelled", "ticket.started", False),
]


@pytest.mark.parametrize(("state", "event_type", "allowed"), TICKET_TABLE)
def test_machine_table_allows_exactly_the_declared_transitions(
    state: str | None, event_type: str, allowed: bool
) -> None:
    machine = build_machine(TICKET)
    assert ((state, event_type) in machine.table) is allowed


def test_machine_every_state_reachable_and_every_live_state_has_a_way_out() -> None:
    machine = build_machine(TICKET)
    reachable, frontier = {machine.spec.initial}, deque([machine.spec.initial])
    while frontier:
        state = frontier.popleft()
        for (source, _), rules in machine.table.items():
            for rule in rules:
                dest = rule.dest or source
                if source == state and dest not in reachable:
                    reachable.add(dest)
                    frontier.append(dest)
    assert reachable == set(machine.spec.states)
    for state in machine.spec.states:
        if not machine.is_terminal(state):
            exits = [r.dest for (s, _), rules in machine.table.items() if s == state for r in rules]
            assert any(d not in (None, state) for d in exits), state


def test_machine_guard_picks_the_first_passing_destination() -> None:
    machine = build_machine(TICKET)
    head = StreamHead("ticket:1", 2, "working")
    assert machine.next_state(head, TicketFinished(outcome="ok"), "ticket.finished") == "done"
    assert machine.next_state(head, TicketFinished(outcome="error"), "ticket.finished") == "failed"


def test_machine_json_export_lists_resolved_sources_and_guards() -> None:
    exported = build_machine(TICKET).to_json()
    json.dumps(exported)
    noted = next(t for t in exported["transitions"] if t["event_type"] == "ticket.noted")
    assert noted["sources"] == ["open", "working"] and noted["dest"] is None
    finished = [t for t in exported["transitions"] if t["event_type"] == "ticket.finished"]
    assert [t["guard"] for t in finished] == ["is_ok", "is_error"]


def test_machine_mermaid_is_a_state_diagram_of_every_transition() -> None:
    text = build_machine(TICKET).to_mermaid()
    assert text.startswith("---") and "stateDiagram-v2" in text
    assert "[*] --> open" in text
    assert "working --> done: ticket.finished [is_ok]" in text
    assert "done --> [*]" in text
    assert "Class " not in text


class Odd(Event, tag="odd.thing"):
    pass


class Untagged(Event):
    pass


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (MachineSpec("Bad-Kind", ["a"], "a", frozenset(), [Transition(Odd, NEW, "a")]), "kind"),
        (MachineSpec("odd", ["a"], "b", frozenset(), [Transition(Odd, NEW, "a")]), "initial"),
        (MachineSpec("odd", ["a"], "a", frozenset({"z"}), [Transition(Odd, NEW, "a")]), "terminal"),
        (MachineSpec("odd", ["a"], "a", frozenset(), [Transition(Odd, ["q"], "a")]), "source"),
        (MachineSpec("odd", ["a"], "a", frozenset(), [Transition(Odd, NEW, "zz")]), "destination"),
        (MachineSpec("odd", ["a"], "a", frozenset(), [Transition(Odd, ["a"], "a")]), "creates"),
        (MachineSpec("odd", ["a"], "a", frozenset(), [Transition(Untagged, NEW, "a")]), "tag"),
    ],
)
def test_machine_invalid_declaration_is_refused_with_a_reason(
    spec: MachineSpec, message: str
) -> None:
    with pytest.raises(InvalidDeclaration, match=message):
        build_machine(spec)


def test_machines_refuse_two_machines_sharing_an_event_type() -> None:
    twin = MachineSpec(
        "twin", ["open"], "open", frozenset(), [Transition(TicketOpened, NEW, "open")]
    )
    with pytest.raises(InvalidDeclaration, match="two machines"):
        Machines([TICKET, twin])


def test_machine_live_sources_exclude_terminal_states() -> None:
    spec = MachineSpec(
        "lamp",
        ["off", "on", "broken"],
        "off",
        frozenset({"broken"}),
        [Transition(Odd, NEW, "off"), Transition(TicketStarted, LIVE, "on")],
    )
    machine = build_machine(spec)
    assert ("broken", "ticket.started") not in machine.table
    assert ("off", "ticket.started") in machine.table


class Lit(Event, tag="odd.lit"):
    pass


class Snuffed(Event, tag="odd.snuffed"):
    pass


def test_machine_states_named_like_sentinels_are_only_themselves() -> None:
    """``live`` and ``new`` are ordinary state names: ``["live"]`` is that one state, and the
    ``LIVE``/``NEW`` objects keep their meaning beside them."""
    spec = MachineSpec(
        "candle",
        ["new", "live", "out"],
        "new",
        frozenset({"live"}),  # a terminal state named "live": LIVE must leave it out
        [
            Transition(Odd, NEW, "new"),
            Transition(Lit, ["live"], "out"),
            Transition(Snuffed, LIVE, "live"),
        ],
    )
    machine = build_machine(spec)
    assert machine.table[(None, "odd.thing")][0].dest == "new"
    assert [s for s, e in machine.table if e == "odd.lit"] == ["live"]
    assert sorted(s for s, e in machine.table if e == "odd.snuffed") == ["new", "out"]
    assert machine.to_json()["transitions"][2]["sources"] == ["new", "out"]


@pytest.mark.parametrize(
    ("states", "sources", "message"),
    [
        (["a", "*"], NEW, "reserved name"),
        (["a", "="], NEW, "reserved name"),
        (["a", LIVE], NEW, "source set, not a state"),
        (["a", ""], NEW, "non-empty string"),
        (["a"], [NEW, "a"], "whole sources"),
        (["a"], "*", "source '\\*' is not a state"),
        (["a"], "live", "source 'live' is not a state"),
        (["a"], [], "sources are empty"),
    ],
)
def test_machine_reserved_names_and_misused_sentinels_fail_loudly(
    states: list[object], sources: object, message: str
) -> None:
    transitions = [Transition(Odd, NEW, "a")]
    if sources is not NEW:
        transitions.append(Transition(Lit, sources, "a"))  # type: ignore[arg-type]
    with pytest.raises(InvalidDeclaration, match=message):
        build_machine(MachineSpec("odd", states, "a", frozenset(), transitions))  # type: ignore[arg-type]


def test_machine_sentinels_are_objects_not_strings() -> None:
    for sentinel in (NEW, ANY, LIVE):
        assert not isinstance(sentinel, str)
        assert sentinel not in ("*", "live", "new", (), "")


def test_machines_stream_head_is_an_immutable_value() -> None:
    """A guard's ``StreamHead`` compares and hashes by its fields and cannot be changed under
    the rules that read it."""
    head = StreamHead("job:j1", 2, "running")
    assert head == StreamHead("job:j1", 2, "running") != StreamHead("job:j1", 3, "running")
    assert hash(head) == hash(StreamHead("job:j1", 2, "running"))
    with pytest.raises(AttributeError):
        head.version = 3  # type: ignore[misc]
