"""A job's result disposition (design.md §4.8): a sub-state machine of a finished job.
Stream ``result:<job id>``; it does not exist until the result is first read, which is what
``unread`` means (the jobs read model shows ``unread`` for a finished job without the stream).

read → accepted | rejected; accepted → integrated. Each step happens once, so a second accept,
a reject after an accept or an integration of a rejected result is refused by the machine.
"""

from __future__ import annotations

from enum import StrEnum

from engine.events import Event
from engine.machines import NEW, MachineSpec, Transition


class ResultState(StrEnum):
    READ = "read"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    INTEGRATED = "integrated"


R = ResultState
UNREAD = "unread"  # a finished job whose result stream does not exist yet


class ResultRead(Event, tag="result.read", frozen=True, kw_only=True):
    by: str  # "operator" or the reading job's id


class ResultAccepted(Event, tag="result.accepted", frozen=True, kw_only=True):
    by: str
    reason: str


class ResultRejected(Event, tag="result.rejected", frozen=True, kw_only=True):
    by: str
    reason: str


class ResultIntegrated(Event, tag="result.integrated", frozen=True, kw_only=True):
    by: str
    sha256: str


RESULT = MachineSpec(
    kind="result",
    description="What became of a finished job's result: read once, then judged, then used.",
    states=list(R),
    initial=R.READ,
    terminal=frozenset({R.REJECTED, R.INTEGRATED}),
    transitions=[
        Transition(ResultRead, NEW, R.READ),
        Transition(ResultAccepted, [R.READ], R.ACCEPTED),
        Transition(ResultRejected, [R.READ], R.REJECTED),
        Transition(ResultIntegrated, [R.ACCEPTED], R.INTEGRATED),
    ],
)
