"""A2A task rules (design.md §4.5): create a task on a session (it takes the reply pointer), move
its status, and end it; an ended task settles the pointer and stops the work done for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.domain import commands as c
from engine.domain import ids
from engine.domain import job as job_
from engine.domain import task as task_
from engine.domain.errors import AlreadyExists
from engine.domain.rules import admission, lineage, lookups, pointer
from engine.domain.rules.registry import Context, rule
from engine.domain.session import Owed
from engine.events import Event


@rule(c.CreateTask)
def create_task(cmd: c.CreateTask, ctx: Context) -> None:
    if ctx.view.task(cmd.task_id) is not None:
        raise AlreadyExists(f"task {cmd.task_id!r} exists", task_id=cmd.task_id)
    session = lookups.session(ctx, cmd.session_id)
    admission.admitting(session, "tasks")
    pointer.take(ctx, session, Owed("a2a", cmd.task_id))
    ctx.append(
        ids.task(cmd.task_id),
        task_.TaskCreated(context=cmd.session_id, message_id=cmd.message_id, text=cmd.text),
    )


@rule(c.AddTaskMessage)
def add_task_message(cmd: c.AddTaskMessage, ctx: Context) -> None:
    row = lookups.task_for(cmd, ctx)
    ctx.append(
        ids.task(row.task_id), task_.TaskMessageAdded(message_id=cmd.message_id, text=cmd.text)
    )
    for job in ctx.view.live_jobs(row.session_id):  # the run working on the older messages
        if job.task_id == row.task_id:
            ctx.append(ids.job(job.job_id), job_.JobSuperseded(superseded_by=cmd.superseded_by))


def _status_rule(command: type[Any], event: Callable[[Any], Event], ends: bool) -> None:
    """Register the rule of a command that appends one status event to its task."""

    @rule(command)
    def status(cmd: Any, ctx: Context) -> None:
        row = lookups.task_for(cmd, ctx)
        ctx.append(ids.task(row.task_id), event(cmd))
        if ends:
            pointer.settle(ctx, row.session_id, Owed("a2a", row.task_id))
            for job in ctx.view.live_jobs(row.session_id):  # the work for it stops too
                if job.task_id == row.task_id:
                    lineage.cancel_one(ctx, job, f"task {row.task_id} ended")

    status.__name__ = f"rule_{command.__name__}"


_status_rule(c.UpdateTaskStatus, lambda cmd: task_.TaskStatusUpdated(text=cmd.text), False)
_status_rule(c.RequireTaskInput, lambda cmd: task_.TaskInputRequired(text=cmd.text), False)
_status_rule(c.RequireTaskAuth, lambda cmd: task_.TaskAuthRequired(text=cmd.text), False)
_status_rule(c.CompleteTask, lambda cmd: task_.TaskCompleted(result=cmd.result), True)
_status_rule(c.FailTask, lambda cmd: task_.TaskFailed(text=cmd.text), True)
_status_rule(c.CancelTask, lambda cmd: task_.TaskCanceled(text=cmd.text), True)
_status_rule(c.RejectTask, lambda cmd: task_.TaskRejected(text=cmd.text), True)
