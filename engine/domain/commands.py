"""Commands: what callers ask the engine to do. Strict at the edge: unknown fields, wrong
types and out-of-range values are refused before anything is decided.

Every command may carry a ``command_id``: the idempotency key (an ``/invocations`` id, an A2A
``messageId``). A known one appends nothing and answers the first outcome, forever.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec

from engine.domain.job import FileEntry, PatchEntry, TraceArg
from engine.domain.lease import LostLog

Id = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_:.@-]{1,200}$")]
SessionId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_:-]{1,200}$")]
CommandId = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
Text = Annotated[str, msgspec.Meta(max_length=1 << 20)]
Short = Annotated[str, msgspec.Meta(max_length=1000)]
Units = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
Pid = Annotated[int, msgspec.Meta(ge=0)]
Digest = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
# A git object id: a commit or a tree, SHA-1 (40) or SHA-256 (64) lowercase hex.
GitId = Annotated[str, msgspec.Meta(pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})$")]
GitIdOrNone = Annotated[str, msgspec.Meta(pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})?$")]
# An absolute path on this host ("" for none), such as a job's git worktree.
AbsolutePath = Annotated[str, msgspec.Meta(max_length=4096, pattern=r"^(/[^\x00\n]*)?$")]
WorkspacePath = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
MAX_PATCH_PATHS = 10_000
PatchPaths = Annotated[tuple[WorkspacePath, ...], msgspec.Meta(max_length=MAX_PATCH_PATHS)]


class Command(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="command"
):
    command_id: CommandId | None = None
    # ``If-Match``: the version the caller believes its target entity is at.
    expected_version: Annotated[int, msgspec.Meta(ge=0)] | None = None


# -- lease -------------------------------------------------------------------------------


class AcquireLease(Command, tag="AcquireLease", frozen=True, kw_only=True):
    name: Id = "workspace"
    holder: Short
    host: Short = ""
    pid: Pid = 0


class RenewLease(Command, tag="RenewLease", frozen=True, kw_only=True):
    name: Id = "workspace"
    holder: Short
    epoch: int


class TakeOverLease(Command, tag="TakeOverLease", frozen=True, kw_only=True):
    name: Id = "workspace"
    holder: Short
    host: Short = ""
    pid: Pid = 0


class ReleaseLease(Command, tag="ReleaseLease", frozen=True, kw_only=True):
    name: Id = "workspace"
    holder: Short
    epoch: int


class RecordNewLog(Command, tag="RecordNewLog", frozen=True, kw_only=True):
    name: Id = "workspace"
    holder: Short
    epoch: int
    lost: LostLog


class RecordCheckpoint(Command, tag="RecordCheckpoint", frozen=True, kw_only=True):
    name: Id = "workspace"
    holder: Short
    epoch: int
    origin: str
    size: int
    root: str
    note: str


# -- session -----------------------------------------------------------------------------


class CreateSession(Command, tag="CreateSession", frozen=True, kw_only=True):
    session_id: SessionId
    agent: Short = ""
    origin: Short = ""
    resource_group: Id | None = None
    units: Units = 1
    has_controller: bool = False
    # Sessions without a controller (created by /invocations or A2A) start at once.
    start_run_id: Id | None = None


class StartSession(Command, tag="StartSession", frozen=True, kw_only=True):
    session_id: SessionId
    run_id: Id
    pid: Pid = 0
    start_token: Short = ""


class DetachSession(Command, tag="DetachSession", frozen=True, kw_only=True):
    session_id: SessionId
    by: Annotated[str, msgspec.Meta(pattern="^(operator|client)$")] = "operator"


class AttachSession(Command, tag="AttachSession", frozen=True, kw_only=True):
    session_id: SessionId


class PauseSession(Command, tag="PauseSession", frozen=True, kw_only=True):
    session_id: SessionId


class SuspendSession(Command, tag="SuspendSession", frozen=True, kw_only=True):
    session_id: SessionId
    reason: Short = ""


class ResumeSession(Command, tag="ResumeSession", frozen=True, kw_only=True):
    session_id: SessionId
    run_id: Id | None = None
    allow_tainted: bool = False


class FinishSession(Command, tag="FinishSession", frozen=True, kw_only=True):
    session_id: SessionId
    requested: Annotated[str, msgspec.Meta(pattern="^(completed|failed)$")] = "completed"
    error: Short = ""


class StopSession(Command, tag="StopSession", frozen=True, kw_only=True):
    session_id: SessionId
    reason: Short = ""
    wait: bool = False  # True: record `stopping` only; a second StopSession records `stopped`


class CancelSession(Command, tag="CancelSession", frozen=True, kw_only=True):
    session_id: SessionId
    reason: Short = ""
    wait: bool = False


class TaintSession(Command, tag="TaintSession", frozen=True, kw_only=True):
    session_id: SessionId
    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]


class OweRelay(Command, tag="OweRelay", frozen=True, kw_only=True):
    """Record that a session owes a relay report to another session (design.md §4.6)."""

    session_id: SessionId
    to_session: SessionId


class SettleRelay(Command, tag="SettleRelay", frozen=True, kw_only=True):
    session_id: SessionId


# -- job ---------------------------------------------------------------------------------


class AcceptJob(Command, tag="AcceptJob", frozen=True, kw_only=True):
    job_id: Id
    session_id: SessionId
    prompt: Text = ""
    prompt_file: Short = ""
    agent: Short = ""
    parent_job: Id | None = None
    batch: Id | None = None
    resource_group: Id | None = None
    units: Units = 1
    write_scope: tuple[Short, ...] = ()
    # The A2A task this job works for: its end completes or fails the task.
    task_id: Id | None = None
    # A job a caller waits on takes the session's reply pointer; a worker spawned by another
    # job does not.
    owed: bool = True
    # Spawned by a running job: the digest of the run token it called with. The rule admits
    # the child only while ``parent_job``'s current run carries this digest.
    caller_token_digest: Digest | None = None
    root: bool = False  # ADR 0048: a session's root job runs the session's agent, not this:
    agent_ignored: Short = ""  # the one its caller named; ``covers`` (not None: it folds) the
    covers: tuple[Id, ...] | None = None  # owed jobs planned to go before it, oldest first


class AcceptJobs(Command, tag="AcceptJobs", frozen=True, kw_only=True):
    """A batch admitted all-or-nothing."""

    jobs: Annotated[tuple[AcceptJob, ...], msgspec.Meta(min_length=1, max_length=64)]


class StartJob(Command, tag="StartJob", frozen=True, kw_only=True):
    job_id: Id
    run_id: Id
    token_digest: Digest | None = None  # sha256 of the run's FOLDLINE_RUN_TOKEN
    pid: Pid = 0
    start_token: Short = ""
    epoch: int = 0
    resumed: bool = False
    # A writer's worktree and its base commit: required for a write scope, the same on resume.
    worktree: AbsolutePath = ""
    base_commit: GitIdOrNone = ""
    input: Literal["", "lines"] = ""  # "lines": the run takes controls (engine.domain.channel)
    trace: TraceArg | None = None  # the run's place in its job's trace (ADR 0059)


class FinishJob(Command, tag="FinishJob", frozen=True, kw_only=True):
    job_id: Id
    # The run that ended: a late finish of an earlier run (the job was relaunched meanwhile)
    # is refused, so it cannot end the new run.
    run_id: Id | None = None
    outcome: Annotated[str, msgspec.Meta(pattern="^(ok|error)$")]
    result: Text = ""
    files: tuple[FileEntry, ...] = ()
    exit_code: int | None = None
    warnings: tuple[Short, ...] = ()
    # What a writer's run changed in its worktree, captured as a patch stored outside the log.
    patch: PatchEntry | None = None
    # The reply judged against its agent's output schema (ADR 0065); None: not judged.
    contract_valid: bool | None = None
    contract_errors: Annotated[tuple[Short, ...], msgspec.Meta(max_length=20)] = ()

    def __post_init__(self) -> None:
        # PatchEntry is also a stored event's field, which is never constrained (an older
        # reader must survive a newer writer): the command checks it here instead.
        if self.patch is not None:
            check_patch(self.patch)


def check_patch(patch: PatchEntry) -> None:
    """``patch`` as a command may carry it.

    Raises:
        ValueError: a field is out of range (on decode: ``msgspec.ValidationError``).
    """
    if not _is(_HEX64, patch.sha256):
        raise ValueError("patch.sha256 must be 64 lowercase hex digits")
    if not _is(_GIT_ID, patch.base_commit):
        raise ValueError("patch.base_commit must be a git commit id (40 or 64 lowercase hex)")
    if patch.size < 0:
        raise ValueError("patch.size must be >= 0")
    if len(patch.paths) > MAX_PATCH_PATHS:
        raise ValueError(f"patch.paths holds at most {MAX_PATCH_PATHS} paths")
    if not all(isinstance(p, str) and 1 <= len(p) <= 4096 for p in patch.paths):
        raise ValueError("each of patch.paths is 1 to 4096 characters")


_HEX64 = re.compile("[0-9a-f]{64}")
_GIT_ID = re.compile("[0-9a-f]{40}|[0-9a-f]{64}")


def _is(pattern: re.Pattern[str], value: object) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


class RecordJobOutput(Command, tag="RecordJobOutput", frozen=True, kw_only=True):
    job_id: Id
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=1 << 20)]


class SupersedeJob(Command, tag="SupersedeJob", frozen=True, kw_only=True):
    job_id: Id
    superseded_by: Short


class FailJobResume(Command, tag="FailJobResume", frozen=True, kw_only=True):
    """Recovery could not start a suspended job again: it ends ``error`` with ``reason``."""

    job_id: Id
    reason: Short


class CancelJob(Command, tag="CancelJob", frozen=True, kw_only=True):
    """Cancel a job and its live descendants. A running one goes to ``cancelling`` until its
    runner confirms with ``ConfirmJobCancelled``; the others are cancelled at once."""

    job_id: Id
    reason: Short = ""


class ConfirmJobCancelled(Command, tag="ConfirmJobCancelled", frozen=True, kw_only=True):
    job_id: Id


class RecordNotifyStarted(Command, tag="RecordNotifyStarted", frozen=True, kw_only=True):
    job_id: Id
    pid: Pid


class RecordNotifyFinished(Command, tag="RecordNotifyFinished", frozen=True, kw_only=True):
    job_id: Id
    exit_code: int | None
    ms: Annotated[int, msgspec.Meta(ge=0)]
    stdout_tail: Short = ""
    stderr_tail: Short = ""


class RecordNotifyLost(Command, tag="RecordNotifyLost", frozen=True, kw_only=True):
    job_id: Id
    pid: Pid
    reason: Short = ""


# -- a job's result (engine.domain.result) -----------------------------------------------


# Who asks, in each: the operator (no caller), or a running job by its run token's digest.


class ReadJobResult(Command, tag="ReadJobResult", frozen=True, kw_only=True):
    job_id: Id
    caller_job: Id | None = None
    caller_token_digest: Digest | None = None


class AcceptJobResult(Command, tag="AcceptJobResult", frozen=True, kw_only=True):
    job_id: Id
    caller_job: Id | None = None
    caller_token_digest: Digest | None = None
    reason: Reason


class RejectJobResult(Command, tag="RejectJobResult", frozen=True, kw_only=True):
    job_id: Id
    caller_job: Id | None = None
    caller_token_digest: Digest | None = None
    reason: Reason


class BeginIntegration(Command, tag="BeginIntegration", frozen=True, kw_only=True):
    """Record the intent to integrate an accepted result's patch (``sha256``, the one its job
    finished with) into the workspace, before any file is written: the working tree's git
    tree ids ``before_tree`` and ``after_tree`` and the ``paths`` it writes. One integration
    of a workspace at a time."""

    job_id: Id
    caller_job: Id | None = None
    caller_token_digest: Digest | None = None
    sha256: Digest
    before_tree: GitId
    after_tree: GitId
    paths: PatchPaths = ()


# The server's own steps after the files are written (or recovery's): no caller.


class ConfirmIntegration(Command, tag="ConfirmIntegration", frozen=True, kw_only=True):
    """The working tree is the intent's ``after_tree``: the result is integrated."""

    job_id: Id
    tree: GitId


class UndoIntegration(Command, tag="UndoIntegration", frozen=True, kw_only=True):
    """The working tree was written back to the intent's ``before_tree``: the result is
    accepted again, and may be integrated again."""

    job_id: Id
    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]


ResultCommand = ReadJobResult | AcceptJobResult | RejectJobResult | BeginIntegration


# -- task --------------------------------------------------------------------------------


class CreateTask(Command, tag="CreateTask", frozen=True, kw_only=True):
    task_id: Id
    session_id: SessionId
    message_id: Short = ""
    text: Text = ""


class AddTaskMessage(Command, tag="AddTaskMessage", frozen=True, kw_only=True):
    """Fold a follow-up into a working task: record it and supersede the task's live runs by
    ``superseded_by`` (the job that will run the task's messages next)."""

    task_id: Id
    message_id: Short = ""
    text: Text = ""
    superseded_by: Id


class DeliverTaskMessage(Command, tag="DeliverTaskMessage", frozen=True, kw_only=True):
    """Deliver a follow-up into the working task's running agent (ADR 0038) instead of
    superseding it: an answer to its pending question, or a message; ``interrupt`` (the
    ``halo/interrupt`` metadata) interrupts the active turn first."""

    task_id: Id
    message_id: Short = ""
    text: Text = ""
    interrupt: bool = False


class UpdateTaskStatus(Command, tag="UpdateTaskStatus", frozen=True, kw_only=True):
    task_id: Id
    text: Text = ""


class RequireTaskInput(Command, tag="RequireTaskInput", frozen=True, kw_only=True):
    task_id: Id
    text: Text = ""


class RequireTaskAuth(Command, tag="RequireTaskAuth", frozen=True, kw_only=True):
    task_id: Id
    text: Text = ""


class CompleteTask(Command, tag="CompleteTask", frozen=True, kw_only=True):
    task_id: Id
    result: Text = ""


class FailTask(Command, tag="FailTask", frozen=True, kw_only=True):
    task_id: Id
    text: Text = ""


class CancelTask(Command, tag="CancelTask", frozen=True, kw_only=True):
    task_id: Id
    text: Text = ""


class RejectTask(Command, tag="RejectTask", frozen=True, kw_only=True):
    task_id: Id
    text: Text = ""
