"""Job: a unit of work on a session (design.md §4.4). Stream ``job:<id>``."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import msgspec

from engine.domain.answer import Part
from engine.events import Event
from engine.machines import NEW, MachineSpec, StreamHead, Transition


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    SUSPENDED = "suspended"
    CANCELLING = "cancelling"
    # Owed to a caller, its run ended while jobs of its subtree were live: it ends (with its
    # own recorded outcome) in the commit that ends the last of them (ADR 0050).
    SETTLING = "settling"
    OK = "ok"
    ERROR = "error"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"


J = JobState
TERMINAL = frozenset({J.OK, J.ERROR, J.SUPERSEDED, J.CANCELLED})
LIVE_STATES = [s for s in J if s not in TERMINAL]
# Capacity is held in these states (design.md §4.7): a paused job keeps what it held until a
# cold pause retires its run (``PAUSE_RETIRED``, ADR 0058); a suspended one released it.
HOLDS_CAPACITY = frozenset({J.QUEUED, J.RUNNING, J.PAUSED, J.CANCELLING})
# How a job is paused (the row's ``pause``): its run's group stopped (``live``), its run asked
# to finalize and ended after a grace (``cold``), and a cold pause whose run is gone, which
# holds nothing any more (``retired``).
PAUSE_LIVE, PAUSE_COLD, PAUSE_RETIRED = "live", "cold", "retired"
# A run process exists in these states: what it says, and what reaches it, is recorded.
RUN_LIVE = [J.RUNNING, J.PAUSED, J.CANCELLING]
# A settling job has no run left to confirm a cancel: it is cancelled at once.
CANCEL_REQUESTABLE = [s for s in LIVE_STATES if s != J.SETTLING]


class FileEntry(msgspec.Struct, frozen=True):
    """A ``MEDIA:`` file: ``path`` as the agent printed it (what the source system answers),
    ``workspace_path`` the same file relative to the workspace (empty in events recorded
    before it existed, whose ``path`` was the workspace-relative one)."""

    path: str
    size: int
    workspace_path: str = ""


class PatchEntry(msgspec.Struct, frozen=True):
    """A finished writer's change, captured from its git worktree as a patch stored outside
    the log: the patch file's ``sha256`` and ``size`` in bytes, the workspace-relative
    ``paths`` it touches, and the ``base_commit`` its worktree started from. Integrating it
    names this ``sha256``."""

    sha256: str
    size: int
    paths: tuple[str, ...]
    base_commit: str


class TraceContext(msgspec.Struct, frozen=True, kw_only=True):
    """Where a run stands in a distributed trace (W3C Trace Context, ADR 0059), recorded with
    its start so that a run resumed after a crash, on any server, continues its job's trace.

    ``run`` is the W3C ``traceparent`` of the run's span; ``job`` that of its job's span, the
    parent of every run of the job; ``parent`` the span id (16 hex digits) of the job span's
    own parent (the request that accepted it), "" for a job that began a trace; ``state`` and
    ``baggage`` the caller's ``tracestate`` and ``baggage`` headers, handed on as they came.
    Never constrained here (an older reader must survive a newer writer): ``StartJob``
    takes it as a ``TraceArg``, which is."""

    run: str = ""
    job: str = ""
    parent: str = ""
    state: str = ""
    baggage: str = ""


_TRACEPARENT = r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}"


class TraceArg(TraceContext, frozen=True, kw_only=True):
    """A ``TraceContext`` as a command gives it, strict: W3C ``traceparent`` values, a span
    id, and a ``tracestate`` and ``baggage`` within the sizes W3C lets a receiver cap."""

    run: Annotated[str, msgspec.Meta(pattern=f"^{_TRACEPARENT}$")]
    job: Annotated[str, msgspec.Meta(pattern=f"^({_TRACEPARENT})?$")] = ""
    parent: Annotated[str, msgspec.Meta(pattern=r"^([0-9a-f]{16})?$")] = ""
    state: Annotated[str, msgspec.Meta(max_length=512)] = ""
    baggage: Annotated[str, msgspec.Meta(max_length=8192)] = ""


class JobAccepted(Event, tag="job.accepted", frozen=True, kw_only=True):
    session: str
    prompt: str = ""
    prompt_file: str = ""
    agent: str = ""
    parent_job: str | None = None
    depth: int = 1
    batch: str | None = None
    resource_group: str | None = None
    units: int = 1
    write_scope: tuple[str, ...] = ()
    task: str | None = None  # the A2A task this job works for
    # The jobs whose prompts come before this job's own on its run's stdin, oldest first: the
    # owed jobs it superseded on a busy session, and the ones those covered (ADR 0048).
    covers: tuple[str, ...] = ()
    # The agent the caller named and the session's own agent overrode (ADR 0048); "" if none.
    agent_ignored: str = ""
    # The job this one forks (ADR 0057): its runs start from that job's prompt and the output
    # it had recorded before this event.
    forked_from: str | None = None


class JobStarted(Event, tag="job.started", frozen=True, kw_only=True):
    run_id: str
    pid: int = 0
    start_token: str = ""
    epoch: int = 0
    resumed: bool = False
    token_digest: str | None = None  # sha256 of the run token; the token itself is never kept
    # "lines": the run takes controls on its stdin while it runs (ADR 0038); "" it does not.
    input: str = ""
    # A writer (a job with a write scope) runs in its own git worktree: its absolute path and
    # the commit it was made at. "" for a job without one (and in events recorded before).
    worktree: str = ""
    base_commit: str = ""
    # The run's place in its job's trace (ADR 0059); None when tracing was off, and in events
    # recorded before it existed.
    trace: TraceContext | None = None


class JobFinished(Event, tag="job.finished", frozen=True, kw_only=True):
    outcome: str  # "ok" | "error"
    result: str = ""
    files: tuple[FileEntry, ...] = ()
    exit_code: int | None = None
    warnings: tuple[str, ...] = ()
    patch: PatchEntry | None = None  # what a writer's run changed in its worktree, if anything
    # The job is owed to a caller and jobs of its subtree were live when its run ended: the
    # run's end is recorded here, and the job waits in ``settling`` (ADR 0050).
    settling: bool = False
    # Its agent's output contract (ADR 0065): whether the reply was JSON its schema accepts
    # (None: no contract, or the run had failed already), and why not.
    contract_valid: bool | None = None
    contract_errors: tuple[str, ...] = ()


class JobSettled(Event, tag="job.settled", frozen=True, kw_only=True):
    """The last live job below a settling job ended: the settling job ends with the outcome
    its run recorded (``job.finished``), in that same commit (ADR 0050)."""

    outcome: str  # "ok" | "error", as the job's finish recorded it


class JobOutput(Event, tag="job.output", frozen=True, kw_only=True):
    """A chunk of the run's live output (what an SSE client sees as a ``delta``)."""

    text: str


class JobSuperseded(Event, tag="job.superseded", frozen=True, kw_only=True):
    superseded_by: str  # a job id, "a2a:<task id>" or "relay:<session>"


class JobPaused(Event, tag="job.paused", frozen=True, kw_only=True):
    """The job is paused (ADR 0058). ``mode`` ``""``/``live``: its run's group is stopped and
    keeps its units and write scope; ``cold``: its run was asked to finalize (a channel run) or
    signalled, and its group ends after ``grace_s``; ``job.retired`` records that end."""

    by: str = ""  # "session": its session's pause paused it, so the session's continue resumes it
    mode: str = ""  # "" (live, and every pause recorded before cold ones existed) or "cold"
    grace_s: int = 0  # cold: how many seconds the run has to end before its group is killed


class JobRetired(Event, tag="job.retired", frozen=True, kw_only=True):
    """A cold-paused job's run is gone (ADR 0058): its output so far stays its partial result;
    it holds no units or write scope until a continue re-admits it with a new run."""

    reason: str = ""
    exit_code: int | None = None


class JobContinueRefused(Event, tag="job.continue_refused", frozen=True, kw_only=True):
    """A continue that needed a new run was refused at re-admission (capacity, counts, write
    scope): the job stays as it was, and the log says why (ADR 0058)."""

    reason: str
    by: str = ""


class JobSignalled(Event, tag="job.signalled", frozen=True, kw_only=True):
    """The server sent a signal to the job's run group (a graceful stop's SIGTERM to a run that
    takes no input, ADR 0058): recorded before it is sent."""

    signal: str
    reason: str = ""


class JobContinued(Event, tag="job.continued", frozen=True, kw_only=True):
    pass


class JobSuspended(Event, tag="job.suspended", frozen=True, kw_only=True):
    """The job's run is gone and the job waits for a continue (or recovery's resume): cut off
    by a crash, or lost while the server lived (killed by a signal, ADR 0058: ``exit_code``
    is then minus the signal's number)."""

    reason: str = ""
    exit_code: int | None = None


class JobCancelRequested(Event, tag="job.cancel_requested", frozen=True, kw_only=True):
    reason: str = ""


class JobCancelled(Event, tag="job.cancelled", frozen=True, kw_only=True):
    reason: str = ""
    # The cancel was requested before (``job.cancel_requested``) and this confirms it: not a
    # control of its own, so it leaves the control revision alone (ADR 0057).
    confirms: bool = False


class JobRelaunched(Event, tag="job.relaunched", frozen=True, kw_only=True):
    """A caller continued this job whose run is gone (suspended, or paused with its process
    gone): its new run's ``job.started`` follows in the same commit (ADR 0057). ``by`` is
    ``operator`` or the calling job."""

    by: str = ""


class JobForked(Event, tag="job.forked", frozen=True, kw_only=True):
    """A caller forked this job into job ``fork`` (ADR 0057): a control of this job, which
    keeps its state."""

    fork: str
    by: str = ""


class JobResumeFailed(Event, tag="job.resume_failed", frozen=True, kw_only=True):
    """Recovery could not start a cut-off job again (its prompt file is gone, its capacity
    is taken, ...): the job ends ``error`` with the reason, and recovery goes on."""

    reason: str


class JobControlSent(Event, tag="job.control", frozen=True, kw_only=True):
    """A control for the running agent (ADR 0038), recorded before anything reaches the run;
    its log position is its id on the channel. ``action`` is ``message`` (a follow-up),
    ``steer``, ``interrupt``, ``finalize``, ``respond`` or ``effort``; ``turn`` is the turn a
    steer or interrupt was meant for, ``request`` the request a response answers,
    ``response`` that answer as JSON text; ``by`` who sent it."""

    action: str
    text: str = ""
    turn: str = ""
    request: str = ""
    response: str = ""
    effort: str = ""
    by: str = ""


class JobControlDelivered(Event, tag="job.control_delivered", frozen=True, kw_only=True):
    """The control recorded at position ``control`` was written whole to run ``run_id``'s
    stdin."""

    control: int
    run_id: str


class JobControlLost(Event, tag="job.control_lost", frozen=True, kw_only=True):
    """The control at ``control`` can reach no run: its run closed its input, so the job takes
    no more controls until its next run. A job that ends with controls still pending loses
    them too, and a next run those meant for the run before (a steer, an interrupt, a
    response), without an event of their own: the end, or the start, says so."""

    control: int
    reason: str = ""


class JobTurnStarted(Event, tag="job.turn_started", frozen=True, kw_only=True):
    """The run said a turn began (its channel's ``turn_started``)."""

    turn: str


class JobTurnEnded(Event, tag="job.turn_ended", frozen=True, kw_only=True):
    """The run said its active turn ended: no turn is active."""

    turn: str


class JobInputRequested(Event, tag="job.input_requested", frozen=True, kw_only=True):
    """The run asked its caller a question, ``request`` being its own id for it; a
    ``respond`` control answers it. ``kind`` ``auth``: it asked for authorization (its task
    is ``auth-required``, ADR 0054), answered the same way."""

    request: str
    question: str = ""
    kind: str = ""


class JobArtifact(Event, tag="job.artifact", frozen=True, kw_only=True):
    """The run made a chunk of an artifact (ADR 0054): ``append`` adds ``parts`` to the
    artifact ``artifact_id``, otherwise they replace it; ``last_chunk`` says it is whole."""

    artifact_id: str
    name: str = ""
    description: str = ""
    parts: tuple[Part, ...] = ()
    append: bool = False
    last_chunk: bool = False


class JobAnswered(Event, tag="job.answered", frozen=True, kw_only=True):
    """The run answered its caller (ADR 0054): ``kind`` ``message``, a direct message of
    ``parts``; or ``reject``, a refusal for the reason ``text``."""

    kind: str
    parts: tuple[Part, ...] = ()
    text: str = ""


class JobProgress(Event, tag="job.progress", frozen=True, kw_only=True):
    """The run said how far it is (the last of a tick's progress lines)."""

    text: str


class JobNotifyStarted(Event, tag="job.notify_started", frozen=True, kw_only=True):
    pid: int


class JobNotifyFinished(Event, tag="job.notify_finished", frozen=True, kw_only=True):
    exit_code: int | None
    ms: int
    stdout_tail: str = ""
    stderr_tail: str = ""


class JobNotifyLost(Event, tag="job.notify_lost", frozen=True, kw_only=True):
    """Recovery found a hook that started before a crash and never finished. It is
    reported, never run again (at most once)."""

    pid: int
    reason: str = ""


def _outcome_is(value: str):  # type: ignore[no-untyped-def]
    def guard(head: StreamHead, event: Event) -> bool:
        if isinstance(event, JobFinished):
            return event.outcome == value and not event.settling
        return isinstance(event, JobSettled) and event.outcome == value

    guard.__name__ = f"outcome_is_{value}"
    return guard


_OK = _outcome_is("ok")
_ERROR = _outcome_is("error")


def _settling(head: StreamHead, event: Event) -> bool:
    return isinstance(event, JobFinished) and event.settling


JOB = MachineSpec(
    kind="job",
    description="A unit of work on a session; leaves running for a terminal state once.",
    states=list(J),
    initial=J.QUEUED,
    terminal=TERMINAL,
    transitions=[
        Transition(JobAccepted, NEW, J.QUEUED),
        Transition(JobStarted, [J.QUEUED, J.PAUSED, J.SUSPENDED], J.RUNNING),
        Transition(JobFinished, [J.RUNNING], J.OK, guard=_OK),
        Transition(JobFinished, [J.RUNNING], J.ERROR, guard=_ERROR),
        Transition(JobFinished, [J.RUNNING], J.SETTLING, guard=_settling),
        Transition(JobSettled, [J.SETTLING], J.OK, guard=_OK),
        Transition(JobSettled, [J.SETTLING], J.ERROR, guard=_ERROR),
        Transition(
            JobSuperseded,
            [J.QUEUED, J.RUNNING, J.PAUSED, J.SUSPENDED, J.SETTLING],
            J.SUPERSEDED,
        ),
        # Paused too: what a run printed just before its group stopped, or while a cold pause
        # lets it finalize (ADR 0058).
        Transition(JobOutput, [J.RUNNING, J.PAUSED, J.CANCELLING]),
        # From paused: a live pause made cold (the rule allows nothing else).
        Transition(JobPaused, [J.RUNNING, J.PAUSED], J.PAUSED),
        Transition(JobRetired, [J.PAUSED]),
        Transition(JobContinueRefused, [J.PAUSED, J.SUSPENDED]),
        Transition(JobSignalled, RUN_LIVE),
        Transition(JobContinued, [J.PAUSED], J.RUNNING),
        Transition(JobSuspended, [J.RUNNING, J.PAUSED], J.SUSPENDED),
        Transition(JobResumeFailed, [J.SUSPENDED], J.ERROR),
        Transition(JobCancelRequested, CANCEL_REQUESTABLE, J.CANCELLING),
        Transition(
            JobCancelled,
            [J.CANCELLING, J.QUEUED, J.PAUSED, J.SUSPENDED, J.SETTLING],
            J.CANCELLED,
        ),
        Transition(JobControlSent, [J.RUNNING]),
        Transition(JobForked, LIVE_STATES),
        Transition(JobRelaunched, [J.PAUSED, J.SUSPENDED]),
        Transition(JobControlDelivered, RUN_LIVE),
        Transition(JobControlLost, LIVE_STATES),
        Transition(JobTurnStarted, RUN_LIVE),
        Transition(JobTurnEnded, RUN_LIVE),
        Transition(JobInputRequested, RUN_LIVE),
        Transition(JobProgress, RUN_LIVE),
        Transition(JobArtifact, RUN_LIVE),
        Transition(JobAnswered, RUN_LIVE),
        Transition(JobNotifyStarted, [J.OK, J.ERROR]),
        Transition(JobNotifyFinished, [J.OK, J.ERROR]),
        Transition(JobNotifyLost, [J.OK, J.ERROR]),
    ],
)
