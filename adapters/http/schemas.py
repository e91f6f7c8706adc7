"""The ``/v1`` request and response bodies as msgspec Structs: the single source of both the
encoding and the OpenAPI document (``adapters.http.openapi``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from engine.domain import channel as ch
from engine.domain.rows import JobRow, LeaseRow, SessionRow, TaskRow, wire
from engine.events import Envelope
from projections.queries import RequestRow

Reason = Annotated[str, msgspec.Meta(max_length=1000)]


class ErrorBody(msgspec.Struct, kw_only=True):
    code: str
    message: str


class ErrorOut(msgspec.Struct, kw_only=True):
    error: ErrorBody


class Owed(msgspec.Struct, kw_only=True):
    kind: str
    ref: str


# The entities' bodies are their rows' wire part (``engine.domain.rows``), derived, so a field
# added to a row is answered and documented without a second declaration. The leaves keep
# their own wire names for the document (``FileOut``, ``Owed``).
SessionOut = wire(
    SessionRow,
    "SessionOut",
    __name__,
    types={"taint_reasons": list[str], "owes": Owed | None},
)


class FileOut(msgspec.Struct, kw_only=True):
    path: str
    size: int
    workspace_path: str = ""


class PatchOut(msgspec.Struct, kw_only=True):
    """A writer's change as captured when it finished: the patch file's digest and size, the
    workspace paths it touches, and the commit its worktree started from."""

    sha256: str
    size: int
    paths: list[str]
    base_commit: str


JobOut = wire(
    JobRow,
    "JobOut",
    __name__,
    types={"files": list[FileOut], "warnings": list[str], "patch": PatchOut | None},
)
TaskOut = wire(TaskRow, "TaskOut", __name__)
LeaseOut = wire(LeaseRow, "LeaseOut", __name__)


class EventOut(Envelope, frozen=True, kw_only=True):
    event: dict[str, Any]
    hash: str


class Page(msgspec.Struct, kw_only=True):
    """A page of rows; ``next`` is the cursor for the following page (null on the last)."""

    next: str | None


class SessionPage(Page, kw_only=True):
    sessions: list[SessionOut]  # type: ignore[valid-type]


class JobPage(Page, kw_only=True):
    jobs: list[JobOut]  # type: ignore[valid-type]


class LeasePage(msgspec.Struct, kw_only=True):
    leases: list[LeaseOut]  # type: ignore[valid-type]


class EventPage(msgspec.Struct, kw_only=True):
    events: list[EventOut]
    next: int


class ControlIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Optional body of a control call; ``input`` is appended to the prompt of a relaunch or
    of a fork. A job's pause takes ``mode`` (``live``, the default, or ``cold``) and a cold
    pause's ``grace`` (seconds, default 30, a fraction rounded up); a session's stop its
    ``grace`` (0 to 3600 s, default ``FOLDLINE_STOP_GRACE_S``), ADR 0058. ``grace`` is a JSON
    number, so ``30.0`` is the ``30`` a document's integer allows."""

    reason: Reason = ""
    input: Annotated[str, msgspec.Meta(max_length=20000)] = ""
    mode: Literal["live", "cold"] | None = None
    grace: Annotated[float, msgspec.Meta(ge=0, le=3600)] | None = None


class TaintIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]


class PingOut(msgspec.Struct, kw_only=True):
    """``GET /ping`` (AgentCore): ``HealthyBusy`` while runs or hooks are in flight."""

    status: str
    time_of_last_update: int | None = None


class AgentErrorOut(msgspec.Struct, kw_only=True):
    """The AgentCore surface's error answer, and every unknown path's: ``{"error": "not
    found"}``."""

    error: str


_CAMEL = {"started_at": "startedAt", "finished_at": "finishedAt", "superseded_by": "supersededBy"}


class InvocationOut(msgspec.Struct, kw_only=True, rename=_CAMEL):
    """``POST /invocations``' job body (sync, a ``get``, an SSE ``result``). ``status`` is
    ``running`` for any live ``state``. ``agent`` is the agent that ran: the session's, fixed
    when it was created (ADR 0048); ``warnings`` first says when the call named another one
    (``session s1 runs agent a; agent b ignored``), then an ok run's ``WARNING:`` lines.
    ``covers``: the superseded jobs whose prompts this job's run got before its own;
    ``supersededBy``: the job that covers a superseded job's prompt. ``duplicate`` answers a
    known ``id``; ``delivered`` and ``control`` a prompt sent into the running job."""

    status: Literal["running", "ok", "error", "superseded", "cancelled"]
    invocation: str
    session: str
    id: str | None
    result: str | None
    files: list[FileOut]
    started_at: str | None
    finished_at: str | None
    state: str
    warnings: list[str]
    agent: str
    covers: list[str]
    superseded_by: str | msgspec.UnsetType = msgspec.UNSET
    duplicate: bool | msgspec.UnsetType = msgspec.UNSET
    delivered: bool | msgspec.UnsetType = msgspec.UNSET
    control: int | msgspec.UnsetType = msgspec.UNSET


class InvocationReceiptOut(msgspec.Struct, kw_only=True):
    """``POST /invocations``' receipt (``async``, the SSE ``accepted`` event); ``warnings``
    only when the call named an agent its session does not run (ADR 0048)."""

    status: Literal["accepted"]
    invocation: str
    session: str
    id: str | None
    delivered: bool | msgspec.UnsetType = msgspec.UNSET
    control: int | msgspec.UnsetType = msgspec.UNSET
    warnings: list[str] | msgspec.UnsetType = msgspec.UNSET


# -- agents that coordinate workers ------------------------------------------------------------

# A relative path that stays in the workspace: no leading "/", no ".." segment, no NUL.
ScopePath = Annotated[
    str,
    msgspec.Meta(min_length=1, max_length=1000, pattern=r"^(?!/)(?!(.*/)?\.\.(/|$))[^\x00]+$"),
]
Prompt = Annotated[str, msgspec.Meta(min_length=1, max_length=1 << 20)]
AgentName = Annotated[str, msgspec.Meta(max_length=64)]


class SpawnItemIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One job to spawn: which agent, its prompt, and (for a writer) where it may write."""

    prompt: Prompt
    agent: AgentName = ""
    write_scope: Annotated[list[ScopePath], msgspec.Meta(max_length=64)] = []


class SpawnIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/jobs``: one item's fields, or ``jobs`` (1..12 items, all-or-nothing).
    ``session`` is for the operator's top-level jobs; a run token implies its own session."""

    jobs: Annotated[list[SpawnItemIn], msgspec.Meta(min_length=1, max_length=12)] | None = None
    session: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_:-]{1,200}$")] | None = None
    prompt: Prompt | None = None
    agent: AgentName = ""
    write_scope: Annotated[list[ScopePath], msgspec.Meta(max_length=64)] = []


SessionName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_:-]{1,200}$")]


class SpawnOneIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The document's view of one job (``SpawnIn`` decodes both shapes). ``session`` may be
    left out with a run token (the run's own session is meant); the operator must name it."""

    session: SessionName
    prompt: Prompt
    agent: AgentName = ""
    write_scope: Annotated[list[ScopePath], msgspec.Meta(max_length=64)] = []


class SpawnBatchIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The document's view of a batch; ``session`` as in ``SpawnOneIn``."""

    session: SessionName
    jobs: Annotated[list[SpawnItemIn], msgspec.Meta(min_length=1, max_length=12)]


class JobsOut(msgspec.Struct, kw_only=True):
    jobs: list[JobOut]  # type: ignore[valid-type]


class WaitOut(msgspec.Struct, kw_only=True):
    """``GET /v1/jobs/wait``: the jobs now, which of them changed, whether time ran out."""

    jobs: list[JobOut]  # type: ignore[valid-type]
    changed: list[str]
    timed_out: bool


class ResultOut(msgspec.Struct, kw_only=True):
    text: str
    next_cursor: int | None  # null once the page reached the end
    result_state: str | None
    # The job has not ended: ``text`` is its output so far, read and recorded by nobody
    # (ADR 0057); false for a result its run finished with.
    partial: bool = False
    # Its agent's output contract (ADR 0065): null when the reply was not judged; the parsed
    # reply (``json``) when it was valid, on every page.
    contract_valid: bool | None = None
    contract_errors: list[str] = []
    json: Any = None


class DispositionIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=500)]


class IntegrateIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Optional: the patch's sha256 the caller judged; a different kept patch is a 409."""

    sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")] | None = None


# -- a run's live channel (adapters.http.channel) ---------------------------------------------

ChannelText = Annotated[str, msgspec.Meta(min_length=1, max_length=ch.STEER_LIMIT)]
ChannelTurn = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class SteerIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Steer the active turn: ``turn`` must be the job's ``turn`` (else 409 ``stale_turn``)."""

    text: ChannelText
    turn: ChannelTurn


class InterruptIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Stop the active turn: ``turn`` must be the job's ``turn`` (else 409 ``stale_turn``)."""

    turn: ChannelTurn


class FinalizeIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Ask the run to finish now; without ``text`` it is told to answer from what it has."""

    text: Annotated[str, msgspec.Meta(max_length=ch.STEER_LIMIT)] = ""


class RespondIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Answer the run's pending request ``request``; ``response`` is at most 64 KiB as JSON."""

    request: ChannelTurn
    response: dict[str, Any]


class EffortIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    effort: Literal["minimal", "low", "medium", "high"]


class ControlSentOut(msgspec.Struct, kw_only=True):
    """``202``: the control is recorded (``control`` is its id, the log position of its
    ``job.control``); its delivery into the run is recorded when it happens."""

    control: int
    job: JobOut  # type: ignore[valid-type]


class ControlOut(msgspec.Struct, kw_only=True):
    """One control and what became of it: ``pending``, ``delivered`` (to run ``run_id``) or
    ``lost`` (``reason``); ``body`` is the JSON line the run is given."""

    control: int
    action: str
    state: str
    body: dict[str, Any]
    sent_by: str
    run_id: str | None
    reason: str | None
    recorded_at: str
    settled_at: str | None


# One question a run asked: ``pending``, ``answered`` (by control ``answer``) or ``dropped``
# (its run or its job ended first); the read's own fields.
RequestOut = wire(RequestRow, "RequestOut", __name__, keep=RequestRow.__struct_fields__)


class ChannelOut(msgspec.Struct, kw_only=True):
    """A job's latest controls (newest first, at most 100) and its runs' questions."""

    controls: list[ControlOut]
    requests: list[RequestOut]  # type: ignore[valid-type]
