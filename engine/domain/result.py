"""A job's result disposition (design.md §4.8): a sub-state machine of a finished job.
Stream ``result:<job id>``; it does not exist until the result is first read, which is what
``unread`` means (the jobs read model shows ``unread`` for a finished job without the stream).

read → accepted | rejected; accepted → integrating → integrated, or integrating → accepted
again when the integration was undone. Judging happens once, so a second accept or a reject
after an accept is refused by the machine, and only an accepted result is integrated.

Integrating a writer's patch into the workspace is crash-safe by recording it in two steps:
``result.integrating`` is the intent, with the working tree's git tree ids before and after
the patch, recorded before any file is written; ``result.integrated`` confirms that the tree
is the ``after`` one; ``result.integration_undone`` records that the ``before`` tree was
written back (recovery after a crash does one or the other), so it can be tried again.
``result.integrated`` straight from ``accepted`` is what logs written before the intent
existed hold.
"""

from __future__ import annotations

from enum import StrEnum

from engine.events import Event
from engine.machines import NEW, MachineSpec, Transition


class ResultState(StrEnum):
    READ = "read"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    INTEGRATING = "integrating"
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


class ResultIntegrating(Event, tag="result.integrating", frozen=True, kw_only=True):
    """The intent, recorded before the workspace is written: the patch ``sha256`` and the
    working tree's git tree ids ``before_tree`` and ``after_tree`` (what recovery compares
    the tree with), and the ``paths`` the patch writes."""

    by: str
    sha256: str
    before_tree: str
    after_tree: str
    paths: tuple[str, ...] = ()


class ResultIntegrated(Event, tag="result.integrated", frozen=True, kw_only=True):
    by: str
    sha256: str
    tree: str = ""  # the working tree's git tree id after it ("" before the intent existed)
    paths: tuple[str, ...] = ()


class ResultIntegrationUndone(Event, tag="result.integration_undone", frozen=True, kw_only=True):
    """The workspace was written back to the intent's ``before_tree``: the result is
    ``accepted`` again."""

    reason: str


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
        Transition(ResultIntegrating, [R.ACCEPTED], R.INTEGRATING),
        # From accepted: the single step logs written before the intent existed recorded.
        Transition(ResultIntegrated, [R.ACCEPTED, R.INTEGRATING], R.INTEGRATED),
        Transition(ResultIntegrationUndone, [R.INTEGRATING], R.ACCEPTED),
    ],
)
