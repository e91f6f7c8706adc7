"""Refusals on the record (ADR 0065): a session's audit stream, ``audit:<session>``.

Every refused spawn batch, control and integrate of a session is appended here, in a write of
its own after the refusal was answered: ``audit.refused`` says what was asked, by whom, what
refused it (the error's stable ``code``) and the limits that did (the error's fields). A burst
of identical refusals (same action, control, code, caller and target) is coalesced: the first is
recorded, and those that follow within the window are counted and recorded as one
``audit.repeated`` with their ``count``, at most once per window.

The stream touches nothing else: no entity stream, no capacity, no version of anything
refused. Its one state, ``recording``, never ends: a session's refusals go on being recorded.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import msgspec

from engine.domain.commands import Command, Id, Short
from engine.events import Event
from engine.machines import NEW, MachineSpec, Transition


class AuditState(StrEnum):
    RECORDING = "recording"


class AuditRefused(Event, tag="audit.refused", frozen=True, kw_only=True):
    action: str  # "spawn", "control" or "integrate"
    control: str = ""  # which: "cancel", "pause", "accept", "steer", ...
    code: str  # the refusal's stable code: "max_children", "forbidden", "conflict", ...
    status: int  # the HTTP status it was answered with
    message: str = ""
    caller: str = "operator"  # or the id of the calling job (a run token's)
    target: str = ""  # the job a control or integrate named; "" for a spawn
    agent: str = ""  # the agents a spawn asked for (comma-separated), or the target's
    route: str = ""  # "POST /v1/jobs/{job_id}/cancel"
    limits: dict[str, str] = msgspec.field(
        default_factory=dict
    )  # the error's fields: reason, used, limit, parent_job, ...


class AuditRepeated(Event, tag="audit.repeated", frozen=True, kw_only=True):
    """``count`` more refusals like the last ``audit.refused`` of the same key came within
    the window after it (or after the previous ``audit.repeated`` of that key)."""

    action: str
    control: str = ""
    code: str
    caller: str = "operator"
    target: str = ""
    count: int


A = AuditState

AUDIT = MachineSpec(
    kind="audit",
    description="A session's refused spawns, controls and integrates, for the record.",
    states=list(A),
    initial=A.RECORDING,
    terminal=frozenset(),
    transitions=[
        Transition(AuditRefused, NEW, A.RECORDING),
        Transition(AuditRefused, [A.RECORDING], A.RECORDING),
        Transition(AuditRepeated, [A.RECORDING], A.RECORDING),
    ],
)


# -- commands ----------------------------------------------------------------------------

Name = Annotated[str, msgspec.Meta(max_length=200)]


class RecordRefusal(Command, tag="RecordRefusal", frozen=True, kw_only=True):
    """Append one refusal (``count`` 0) or a coalesced burst (``count`` > 0) to the audit
    stream of ``session_id``."""

    session_id: Id
    action: Name
    control: Name = ""
    code: Name
    status: int = 0
    message: Short = ""
    caller: Name = "operator"
    target: Name = ""
    agent: Short = ""
    route: Name = ""
    limits: Annotated[dict[Name, Short], msgspec.Meta(max_length=20)] = msgspec.field(
        default_factory=dict
    )
    count: Annotated[int, msgspec.Meta(ge=0)] = 0
