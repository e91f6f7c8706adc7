"""What a run answers (ADR 0054): each answer is recorded on the job's stream as the run said
it, and, when the job works for an open A2A task, on the task's stream in the same write.

- ``artifact``: a chunk of an artifact (``job.artifact``; ``task.artifact_updated``).
- ``message``: a direct message (``job.answered``); the task completes with it as its reply
  (``task.completed`` with ``reply``), which a blocking SendMessage answers as a Message.
- ``reject``: a refusal (``job.answered``); the task is rejected with the reason.
- ``auth_required``: a question (``job.input_requested``, kind ``auth``) answered as any other
  (the caller's next message on the task); the task is ``auth-required`` until then.

A message or a refusal ends the task at once, and settles its pointer, but leaves the job to
its run: the run ends by itself, and its finish then finds the task ended (``end_task_of``).
"""

from __future__ import annotations

from typing import Any

from engine.domain import answer, ids
from engine.domain import channel as ch
from engine.domain import job as job_
from engine.domain import task as task_
from engine.domain.rows import JobRow
from engine.domain.rules import pointer
from engine.domain.rules.registry import Context
from engine.domain.session import Owed
from engine.domain.task import TaskState as T
from engine.errors import InvalidArgument
from engine.events import Event

REJECTED = "rejected by the agent"  # a refusal's reason when the run gave none


def record(ctx: Context, job: JobRow, cmd: ch.RecordRunSignal) -> None:
    """Record answer ``cmd`` of ``job``'s current run (see the module docstring).

    Raises:
        InvalidArgument: parts missing or past their limits, an artifact without its id, an
            ``auth_required`` without its request.
    """
    stream = ids.job(job.job_id)
    task = ctx.view.task(job.task_id) if job.task_id else None
    open_task = task if task is not None and task.state not in task_.TERMINAL else None
    if cmd.signal == "artifact":
        if not cmd.artifact_id:
            raise InvalidArgument("an artifact needs its artifactId")
        answer.check_parts(cmd.parts, f"artifact {cmd.artifact_id!r}")
        ctx.append(stream, job_.JobArtifact(**_chunk(cmd)))
        if open_task is not None:
            ctx.append(ids.task(open_task.task_id), task_.TaskArtifactUpdated(**_chunk(cmd)))
    elif cmd.signal == "message":
        answer.check_parts(cmd.parts, "the message")
        ctx.append(stream, job_.JobAnswered(kind="message", parts=cmd.parts))
        if open_task is not None:
            done = task_.TaskCompleted(result=answer.summary_of(cmd.parts), reply=cmd.parts)
            _end(ctx, open_task.task_id, open_task.session_id, done)
    elif cmd.signal == "reject":
        reason = cmd.text or REJECTED
        ctx.append(stream, job_.JobAnswered(kind="reject", text=reason))
        if open_task is not None:
            _end(ctx, open_task.task_id, open_task.session_id, task_.TaskRejected(text=reason))
    elif cmd.signal == "auth_required":
        if not cmd.request:
            raise InvalidArgument("auth_required needs its request")
        asked = job_.JobInputRequested(request=cmd.request, question=cmd.question, kind="auth")
        ctx.append(stream, asked)
        if open_task is not None and open_task.state in (T.SUBMITTED, T.WORKING):
            ctx.append(ids.task(open_task.task_id), task_.TaskAuthRequired(text=cmd.question))


def _end(ctx: Context, task_id: str, session_id: str, event: Event) -> None:
    """End the task with ``event`` and settle its pointer; its job is left to its run."""
    ctx.append(ids.task(task_id), event)
    pointer.settle(ctx, session_id, Owed("a2a", task_id))


def _chunk(cmd: ch.RecordRunSignal) -> dict[str, Any]:
    return {
        "artifact_id": cmd.artifact_id,
        "name": cmd.name,
        "description": cmd.description,
        "parts": cmd.parts,
        "append": cmd.append,
        "last_chunk": cmd.last_chunk,
    }
