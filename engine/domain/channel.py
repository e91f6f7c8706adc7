"""A run's live channel (ADR 0038): the commands that send a control into a running agent, record
what reached it, and record what the run said back (a turn, a request for input, progress).

A control is an event first (``job.control``), appended before anything is written to the run;
the run's watcher writes it as one JSON line and records ``job.control_delivered`` once the
whole line is in the pipe. Limits are the source system's: steer and finalize text 1 to 20,000
characters, a response at most 64 KiB of JSON, an effort from a fixed set.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from engine.domain.commands import Command, Digest, Id, Short, Text

ACTIONS = ("message", "steer", "interrupt", "finalize", "respond", "effort")
Action = Literal["message", "steer", "interrupt", "finalize", "respond", "effort"]
# The turn a steer or interrupt is meant for must be the run's active one (the guard).
NEEDS_TURN = frozenset({"steer", "interrupt"})
STEER_LIMIT = 20_000  # characters of steer and finalize text
RESPONSE_LIMIT = 65_536  # characters of a response, as JSON
EFFORTS = ("minimal", "low", "medium", "high")
FINALIZE_TEXT = "Finalize now from the evidence you already have, and give your final answer."
INPUT_LINES = "lines"  # the one channel protocol: JSON lines on stdin, FOLDLINE: lines on stdout
Input = Literal["", "lines"]  # what a run takes while it runs: nothing, or the channel

RunText = Annotated[str, msgspec.Meta(max_length=1000)]
Turn = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class SendControl(Command, tag="SendControl", frozen=True, kw_only=True):
    """A control for job ``job_id``'s running agent, by the operator (``caller_job`` None) or
    an ancestor's live run; ``by`` names another sender (``a2a:<task>``, ``invocation``)."""

    job_id: Id
    action: Action
    text: Text = ""
    turn: Short = ""
    request: Short = ""
    response: str = ""  # respond: a JSON object, as text
    effort: Short = ""
    by: Short = ""
    caller_job: Id | None = None
    caller_token_digest: Digest | None = None


class RecordControlDelivered(Command, tag="RecordControlDelivered", frozen=True, kw_only=True):
    job_id: Id
    control: Annotated[int, msgspec.Meta(ge=1)]
    run_id: Id


class RecordControlLost(Command, tag="RecordControlLost", frozen=True, kw_only=True):
    job_id: Id
    control: Annotated[int, msgspec.Meta(ge=1)]
    reason: Short = ""


class RecordRunSignal(Command, tag="RecordRunSignal", frozen=True, kw_only=True):
    """What a run said on its channel: ``turn_started`` or ``turn_ended`` (``turn``),
    ``input_required`` (``request``, ``question``) or ``progress`` (``text``)."""

    job_id: Id
    run_id: Id
    signal: Literal["turn_started", "turn_ended", "input_required", "progress"]
    turn: Turn | None = None
    request: Turn | None = None
    question: Annotated[str, msgspec.Meta(max_length=20_000)] = ""
    text: RunText = ""
