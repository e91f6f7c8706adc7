"""Session: a long-lived agent context (design.md §4.3). Stream ``session:<id>``."""

from __future__ import annotations

from enum import StrEnum

import msgspec

from engine.events import Event
from engine.machines import ANY, NEW, MachineSpec, StreamHead, Transition


class SessionState(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    DETACHED = "detached"
    PAUSED = "paused"
    SUSPENDED = "suspended"
    FINISHING = "finishing"
    STOPPING = "stopping"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"
    CANCELLED = "cancelled"


S = SessionState
TERMINAL = frozenset({S.COMPLETED, S.FAILED, S.STOPPED, S.CANCELLED})
LIVE_STATES = [s for s in S if s not in TERMINAL]
# Capacity is held in these states (design.md §4.7); paused and suspended release it.
HOLDS_CAPACITY = frozenset(
    {S.STARTING, S.RUNNING, S.DETACHED, S.FINISHING, S.STOPPING, S.CANCELLING}
)


class Owed(msgspec.Struct, frozen=True):
    """What a session owes a report to: a job, an A2A task or a relay (another session)."""

    kind: str  # "job" | "a2a" | "relay"
    ref: str


class SessionCreated(Event, tag="session.created", frozen=True, kw_only=True):
    agent: str = ""
    origin: str = ""  # "invocations", "a2a", "embedded", ...
    resource_group: str | None = None
    units: int = 1
    has_controller: bool = False


class SessionStarted(Event, tag="session.started", frozen=True, kw_only=True):
    run_id: str
    pid: int = 0
    start_token: str = ""


class SessionDetached(Event, tag="session.detached", frozen=True, kw_only=True):
    by: str = "client"  # "operator" when an operator asked: a late finish never overrides it


class SessionAttached(Event, tag="session.attached", frozen=True, kw_only=True):
    pass


class SessionPaused(Event, tag="session.paused", frozen=True, kw_only=True):
    pass


class SessionSuspended(Event, tag="session.suspended", frozen=True, kw_only=True):
    reason: str = ""


class SessionResumed(Event, tag="session.resumed", frozen=True, kw_only=True):
    run_id: str = ""


class SessionFinishing(Event, tag="session.finishing", frozen=True, kw_only=True):
    requested: str  # "completed" | "failed"
    error: str = ""


class SessionFinished(Event, tag="session.finished", frozen=True, kw_only=True):
    outcome: str  # "completed" | "failed" | "detached"


class SessionStopping(Event, tag="session.stopping", frozen=True, kw_only=True):
    reason: str = ""


class SessionStopped(Event, tag="session.stopped", frozen=True, kw_only=True):
    pass


class SessionCancelling(Event, tag="session.cancelling", frozen=True, kw_only=True):
    reason: str = ""


class SessionCancelled(Event, tag="session.cancelled", frozen=True, kw_only=True):
    pass


class SessionTainted(Event, tag="session.tainted", frozen=True, kw_only=True):
    reason: str


class SessionOwes(Event, tag="session.owes", frozen=True, kw_only=True):
    owed: Owed


class SessionSettled(Event, tag="session.settled", frozen=True, kw_only=True):
    owed: Owed


def _outcome_is(value: str):  # type: ignore[no-untyped-def]
    def guard(head: StreamHead, event: Event) -> bool:
        return isinstance(event, SessionFinished) and event.outcome == value

    guard.__name__ = f"outcome_is_{value}"
    return guard


SESSION = MachineSpec(
    kind="session",
    description="A long-lived agent context; its work is its jobs.",
    states=list(S),
    initial=S.STARTING,
    terminal=TERMINAL,
    transitions=[
        Transition(SessionCreated, NEW, S.STARTING),
        Transition(SessionStarted, [S.STARTING], S.RUNNING),
        Transition(SessionDetached, [S.STARTING, S.RUNNING, S.PAUSED], S.DETACHED),
        Transition(SessionAttached, [S.DETACHED, S.PAUSED, S.SUSPENDED], S.RUNNING),
        Transition(SessionPaused, [S.RUNNING, S.DETACHED, S.SUSPENDED], S.PAUSED),
        Transition(SessionSuspended, [S.STARTING, S.RUNNING, S.DETACHED, S.PAUSED], S.SUSPENDED),
        Transition(SessionResumed, [S.DETACHED, S.PAUSED, S.SUSPENDED], S.STARTING),
        Transition(
            SessionFinishing,
            [S.STARTING, S.RUNNING, S.DETACHED, S.PAUSED, S.SUSPENDED],
            S.FINISHING,
        ),
        Transition(SessionFinished, [S.FINISHING], S.COMPLETED, guard=_outcome_is("completed")),
        Transition(SessionFinished, [S.FINISHING], S.FAILED, guard=_outcome_is("failed")),
        Transition(SessionFinished, [S.FINISHING], S.DETACHED, guard=_outcome_is("detached")),
        # Precedence cancel > stop > finish: a stop cannot replace a cancel in progress, and
        # finishing cannot start once a stop or cancel has.
        Transition(
            SessionStopping,
            [s for s in LIVE_STATES if s not in (S.STOPPING, S.CANCELLING)],
            S.STOPPING,
        ),
        Transition(SessionStopped, [S.STOPPING], S.STOPPED),
        Transition(SessionCancelling, [s for s in LIVE_STATES if s != S.CANCELLING], S.CANCELLING),
        Transition(SessionCancelled, [S.CANCELLING], S.CANCELLED),
        Transition(SessionTainted, ANY),
        Transition(SessionOwes, LIVE_STATES),
        Transition(SessionSettled, LIVE_STATES),
    ],
)
