"""Retention (ADR 0062): an ended entity's read-model rows retired by policy, as an event.

Retiring a row is recorded, never done behind the log's back: ``retention.retired`` on the
stream ``retention:<entity id>`` says which machine's entity (``kind``), under which policy,
and when it had ended. The read models fold it like any event: ``projections.jobs`` deletes
the job's row, ``projections.retired`` keeps a small row per retired entity (when, why, and the
idempotency key that made it), so a rebuild or ``verify`` refolds exactly the rows the live
tables hold, and a query about a retired entity answers that it was retired, and when.

The stream's id is the entity's, so the verifier's shares (by entity id) fold the retirement
with the entity's own events. The events themselves are never touched: ``foldline history``
still tells the whole story, and ``foldline archive`` is what moves old events away.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

from engine.events import Event
from engine.machines import NEW, MachineSpec, Transition

# The machines whose ended entities a policy may retire (``projections.queries.retired``).
KINDS = ("job", "task", "push", "session")


class RetentionState(StrEnum):
    RETIRED = "retired"


class EntityRetired(Event, tag="retention.retired", frozen=True, kw_only=True):
    """The read-model rows of the ended entity ``kind:<this stream's id>`` are retired."""

    kind: str
    policy: str  # what retired it, e.g. "ended more than 30 days ago"
    ended_at: str  # when the entity last changed (its row's updated_at)
    command_id: str | None = None  # the idempotency key that made it: answered forever


RETENTION = MachineSpec(
    kind="retention",
    description="The retirement of an ended entity's read-model rows, by policy.",
    states=list(RetentionState),
    initial=RetentionState.RETIRED,
    terminal=frozenset(),
    transitions=[
        Transition(EntityRetired, NEW, RetentionState.RETIRED),
        # Another machine's entity under the same id (ids are per machine) retires later.
        Transition(EntityRetired, [RetentionState.RETIRED], RetentionState.RETIRED),
    ],
)


class RetiredRow(msgspec.Struct, frozen=True, kw_only=True):
    """A row of the ``retired`` read model: an entity whose rows a policy retired."""

    entity_id: str
    kind: str
    retired_at: str
    position: int
    policy: str
    ended_at: str
    command_id: str | None = None
