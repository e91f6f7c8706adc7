"""Task: an A2A task (design.md §4.5), with A2A v1.0 state names. Stream ``task:<id>``."""

from __future__ import annotations

from enum import StrEnum

from engine.domain.answer import Part
from engine.domain.job import FileEntry
from engine.domain.push import TaskPushConfigDeleted, TaskPushConfigSet
from engine.events import Event
from engine.machines import NEW, MachineSpec, Transition


class TaskState(StrEnum):
    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    AUTH_REQUIRED = "auth-required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    REJECTED = "rejected"


T = TaskState
TERMINAL = frozenset({T.COMPLETED, T.FAILED, T.CANCELED, T.REJECTED})
OPEN = [T.SUBMITTED, T.WORKING, T.INPUT_REQUIRED, T.AUTH_REQUIRED]


class TaskCreated(Event, tag="task.created", frozen=True, kw_only=True):
    context: str  # the session id
    message_id: str = ""
    text: str = ""


class TaskMessageAdded(Event, tag="task.message_added", frozen=True, kw_only=True):
    """A follow-up message folded into an open task: delivered into its live run when that run
    takes input (ADR 0038), else the run is superseded and a new one starts with all the
    task's messages (ADR 0024); the task is (or goes back to) working."""

    message_id: str = ""
    text: str = ""


class TaskStatusUpdated(Event, tag="task.status_updated", frozen=True, kw_only=True):
    text: str = ""


class TaskInputRequired(Event, tag="task.input_required", frozen=True, kw_only=True):
    text: str = ""


class TaskAuthRequired(Event, tag="task.auth_required", frozen=True, kw_only=True):
    text: str = ""


class TaskCompleted(Event, tag="task.completed", frozen=True, kw_only=True):
    result: str = ""
    warnings: tuple[str, ...] = ()  # the job's WARNING: lines
    files: tuple[FileEntry, ...] = ()  # the job's MEDIA: files: the result artifact's file parts
    # The run answered with a message (ADR 0054): its parts are the answer, not an artifact.
    reply: tuple[Part, ...] | None = None
    # The result is JSON its agent's output contract accepted (ADR 0065): the result artifact
    # carries it as a data part too.
    structured: bool = False


class TaskArtifactUpdated(Event, tag="task.artifact_updated", frozen=True, kw_only=True):
    """A chunk of an artifact the task's run made (ADR 0054), as ``job.artifact`` says it."""

    artifact_id: str
    name: str = ""
    description: str = ""
    parts: tuple[Part, ...] = ()
    append: bool = False
    last_chunk: bool = False


class TaskFailed(Event, tag="task.failed", frozen=True, kw_only=True):
    text: str = ""


class TaskCanceled(Event, tag="task.canceled", frozen=True, kw_only=True):
    text: str = ""


class TaskRejected(Event, tag="task.rejected", frozen=True, kw_only=True):
    text: str = ""


def completed_status(event: TaskCompleted) -> str | None:
    """A completed task's status text: what it warned of ("completed with warnings"), or None
    when its status message is its result (which is always its artifact)."""
    return "completed with warnings: " + "; ".join(event.warnings) if event.warnings else None


TASK = MachineSpec(
    kind="task",
    description="An A2A task on a session (its context); terminal exactly once.",
    states=list(T),
    initial=T.SUBMITTED,
    terminal=TERMINAL,
    transitions=[
        Transition(TaskCreated, NEW, T.SUBMITTED),
        Transition(TaskStatusUpdated, OPEN, T.WORKING),
        Transition(TaskMessageAdded, OPEN, T.WORKING),
        Transition(TaskInputRequired, [T.SUBMITTED, T.WORKING], T.INPUT_REQUIRED),
        Transition(TaskAuthRequired, [T.SUBMITTED, T.WORKING], T.AUTH_REQUIRED),
        Transition(TaskCompleted, OPEN, T.COMPLETED),
        Transition(TaskFailed, OPEN, T.FAILED),
        Transition(TaskCanceled, OPEN, T.CANCELED),
        Transition(TaskRejected, OPEN, T.REJECTED),
        Transition(TaskArtifactUpdated, OPEN),  # ADR 0054
        Transition(TaskPushConfigSet, OPEN),  # ADR 0039
        Transition(TaskPushConfigDeleted, list(T)),
    ],
)
