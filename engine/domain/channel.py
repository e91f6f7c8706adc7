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

from engine.domain.answer import Part
from engine.domain.commands import Command, Digest, Id, Short, Text

ACTIONS = ("message", "steer", "interrupt", "finalize", "respond", "effort")
Action = Literal["message", "steer", "interrupt", "finalize", "respond", "effort"]
# The turn a steer or interrupt is meant for must be the run's active one (the guard).
NEEDS_TURN = frozenset({"steer", "interrupt"})
STEER_LIMIT = 20_000  # characters of steer and finalize text
RESPONSE_LIMIT = 65_536  # characters of a response, as JSON
RESPONSE_DEPTH = 32  # how deep a response may nest: every reader parses it again
MESSAGE_LIMIT = 1 << 20  # characters of a follow-up message
EFFORTS = ("minimal", "low", "medium", "high")
FINALIZE_TEXT = "Finalize now from the evidence you already have, and give your final answer."
INPUT_LINES = "lines"  # the one channel protocol: JSON lines on stdin, FOLDLINE: lines on stdout
Input = Literal["", "lines"]  # what a run takes while it runs: nothing, or the channel

RUN_TEXT_LIMIT = 1000  # characters of a run's progress text
RunText = Annotated[str, msgspec.Meta(max_length=RUN_TEXT_LIMIT)]
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
    # ``If-Match``: the job's control revision (ADR 0057); the HTTP controls require it.
    expected_revision: Annotated[int, msgspec.Meta(ge=0)] | None = None


class RecordControlDelivered(Command, tag="RecordControlDelivered", frozen=True, kw_only=True):
    """Control ``control`` of the job is whole in the stdin of its current run ``run_id``."""

    job_id: Id
    control: Annotated[int, msgspec.Meta(ge=1)]
    run_id: Id


class RecordControlLost(Command, tag="RecordControlLost", frozen=True, kw_only=True):
    """Control ``control`` of the job cannot reach its run, which closed its input."""

    job_id: Id
    control: Annotated[int, msgspec.Meta(ge=1)]
    reason: Short = ""


ANSWERS = ("artifact", "message", "reject", "auth_required")  # ADR 0054: any run may say them


class RecordRunSignal(Command, tag="RecordRunSignal", frozen=True, kw_only=True):
    """What a run said on its channel: ``turn_started`` or ``turn_ended`` (``turn``),
    ``input_required`` (``request``, ``question``) or ``progress`` (``text``); or what it
    answers (ADR 0054): ``artifact`` (``artifact_id``, ``parts``, ``append``, ``last_chunk``,
    optional ``name`` and ``description``), ``message`` (``parts``), ``reject`` (the reason,
    ``text``) or ``auth_required`` (``request``, ``question``)."""

    job_id: Id
    run_id: Id
    signal: Literal[
        "turn_started",
        "turn_ended",
        "input_required",
        "progress",
        "artifact",
        "message",
        "reject",
        "auth_required",
    ]
    turn: Turn | None = None
    request: Turn | None = None
    question: Annotated[str, msgspec.Meta(max_length=20_000)] = ""
    text: RunText = ""
    artifact_id: Turn | None = None
    name: Annotated[str, msgspec.Meta(max_length=200)] = ""
    description: RunText = ""
    parts: tuple[Part, ...] = ()
    append: bool = False
    last_chunk: bool = False


def nesting(text: str) -> int:
    """How deep JSON text nests its arrays and objects, counted without parsing it (a parser
    recurses, and would fail on a deep value in one reader and not in another)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest
