"""Push notifications (ADR 0039): a caller's webhook configs on its task, and the delivery trail.

A config (``task.push_config_set``, ``task.push_config_deleted``) lives on its task's stream. Each
task transition a caller should hear about owes one delivery per config: a row of the outbox
read model (``projections.push``), written in the same transaction as the transition. Every
attempt to deliver it, and how it ended, is an event on the delivery's own stream
``push:<delivery id>`` (``<cause position>.<config position>.<task id>``), whose machine is
below: the
auditor reads the whole trail with ``foldline history``.

The delivery policy is the source system's (ADR 0039): 15 s per request, at most 4 in
flight, 2xx delivered, a 4xx other than 408/429 (or a URL refused at send time) dead at once,
anything else retried after 5 s x 2^(n-1) capped at 10 min, +-20 % jitter, dead after 10
attempts or one hour. Every row is tried at least once.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

import msgspec

from engine.domain.commands import Command, Id, Short
from engine.events import Event
from engine.machines import NEW, MachineSpec, Transition

TIMEOUT_S = 15.0  # one request
CONCURRENCY = 4  # requests in flight, server-wide
MAX_ATTEMPTS = 10
MAX_AGE_S = 3600.0  # from the transition that owes the delivery
BASE_DELAY_S = 5.0
MAX_DELAY_S = 600.0
JITTER = 0.2
# An attempt's claim outlives its request by this much: a holder that died mid-request leaves
# the row to be claimed again once the claim runs out (or at once by the next server).
CLAIM_MARGIN_S = 5.0
DIALECTS = ("1.0", "0.3")  # the A2A dialect the config was made in: the payload's shape


class PushConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Where and how to tell a caller about its task: ``token`` goes in
    ``X-A2A-Notification-Token``, ``scheme`` and ``credentials`` in ``Authorization``."""

    config_id: str
    url: str
    token: str = ""
    scheme: str = ""
    credentials: str = ""
    dialect: str = "1.0"


class TaskPushConfigSet(Event, tag="task.push_config_set", frozen=True, kw_only=True):
    """A push config made (or replaced, same id) on an open task."""

    config: PushConfig


class TaskPushConfigDeleted(Event, tag="task.push_config_deleted", frozen=True, kw_only=True):
    """A config removed: it owes nothing more (deliveries owed already still go out)."""

    config_id: str


class PushState(StrEnum):
    SENDING = "sending"  # an attempt is claimed and under way
    WAITING = "waiting"  # the last attempt failed; the next is due at ``retry_at``
    DELIVERED = "delivered"
    DEAD = "dead"


P = PushState


class PushAttemptStarted(Event, tag="push.attempt_started", frozen=True, kw_only=True):
    """An attempt claimed by ``holder`` (a server instance) until ``until``."""

    attempt: int
    holder: str
    until: str


class PushDelivered(Event, tag="push.delivered", frozen=True, kw_only=True):
    attempt: int
    status: int


class PushFailed(Event, tag="push.failed", frozen=True, kw_only=True):
    """The attempt failed and another is due at ``retry_at``; ``status`` 0: no answer."""

    attempt: int
    status: int
    error: str
    retry_at: str


class PushDead(Event, tag="push.dead", frozen=True, kw_only=True):
    """Given up: ``reason`` says why (a refusal, the attempts, the age)."""

    attempt: int
    status: int
    error: str
    reason: str


PUSH = MachineSpec(
    kind="push",
    description="One owed push notification: attempts until delivered or dead.",
    states=list(P),
    initial=P.SENDING,
    terminal=frozenset({P.DELIVERED, P.DEAD}),
    transitions=[
        Transition(PushAttemptStarted, NEW, P.SENDING),
        Transition(PushAttemptStarted, [P.WAITING, P.SENDING], P.SENDING),
        Transition(PushDelivered, [P.SENDING], P.DELIVERED),
        Transition(PushFailed, [P.SENDING], P.WAITING),
        Transition(PushDead, [P.SENDING, P.WAITING], P.DEAD),
    ],
)


# -- commands ----------------------------------------------------------------------------

ConfigId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_:.@-]{1,200}$")]
Url = Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]
Secret = Annotated[str, msgspec.Meta(max_length=4096, pattern=r"^[!-~]*$")]  # a header value


class SetPushConfig(Command, tag="SetPushConfig", frozen=True, kw_only=True):
    """Make (or replace) a push config on an open task; its URL passed the policy already."""

    task_id: Id
    config_id: ConfigId
    url: Url
    token: Secret = ""
    scheme: Annotated[str, msgspec.Meta(max_length=100, pattern=r"^[A-Za-z0-9._~+/-]*$")] = ""
    credentials: Secret = ""
    dialect: Literal["1.0", "0.3"] = "1.0"


class DeletePushConfig(Command, tag="DeletePushConfig", frozen=True, kw_only=True):
    task_id: Id
    config_id: ConfigId


DeliveryId = Annotated[str, msgspec.Meta(pattern=r"^[0-9]+\.[0-9]+\.[A-Za-z0-9_:.@-]{1,200}$")]


class StartPushAttempt(Command, tag="StartPushAttempt", frozen=True, kw_only=True):
    """Claim a due delivery for one attempt by ``holder`` (a server instance)."""

    delivery_id: DeliveryId
    holder: Short


class RecordPushOutcome(Command, tag="RecordPushOutcome", frozen=True, kw_only=True):
    """How attempt ``attempt`` ended: the answer's ``status`` (0: none), or ``refused`` (the
    URL policy, at send time); ``jitter`` spreads a retry (chosen by the caller, recorded)."""

    delivery_id: DeliveryId
    attempt: Annotated[int, msgspec.Meta(ge=1)]
    holder: Short
    status: Annotated[int, msgspec.Meta(ge=0, le=999)] = 0
    error: Short = ""
    refused: bool = False
    jitter: Annotated[float, msgspec.Meta(ge=-0.2, le=0.2)] = 0.0


class ExpirePush(Command, tag="ExpirePush", frozen=True, kw_only=True):
    """Give up a waiting delivery whose next attempt would fall past its maximum age."""

    delivery_id: DeliveryId


# -- the policy ---------------------------------------------------------------------------


def retry_delay_s(attempt: int, jitter: float) -> float:
    """How long after failed attempt ``attempt`` (1-based) the next is due; ``jitter`` in
    [-0.2, 0.2] spreads the retries of many rows."""
    return float(min(BASE_DELAY_S * 2.0 ** (attempt - 1), MAX_DELAY_S) * (1 + jitter))


def is_final(status: int) -> bool:
    """A refusal that retrying cannot change: a 4xx other than 408 (timeout), 429 (slow down)."""
    return 400 <= status < 500 and status not in (408, 429)


HIDDEN = "(hidden)"


def without_secrets(event: Event) -> Event:
    """``event`` as a run may read it: a config's token and credentials are the caller's, and
    a run that read them could send its caller notifications in the server's name."""
    if not isinstance(event, TaskPushConfigSet):
        return event
    config = event.config
    hidden = msgspec.structs.replace(
        config,
        token=HIDDEN if config.token else "",
        credentials=HIDDEN if config.credentials else "",
    )
    return msgspec.structs.replace(event, config=hidden)


def delivery_id(cause: int, config_position: int, task_id: str) -> str:
    """The delivery a transition (its log position) owes one config (the position of the
    event that set it) of a task. It ends in the task's id, as its stream ``push:<id>`` does,
    so an audit split by entity puts the delivery's events, its outbox row and its task's
    events in one share (``engine.audit.tables.share_of``)."""
    return f"{cause}.{config_position}.{task_id}"
