"""The quiet gate (ADR 0050; the source system's "the root's whole subtree idle"): a job owed to
a caller ends only when its run has ended and no job below it is live.

``rules.job.finish_job`` decides the first half: an owed job whose run ends while jobs of its
subtree are live records its run's end (outcome, result, files, exit) and waits ``settling``,
its session's pointer and its A2A task untouched. This module decides the second half, after
every command, in the same transaction: once a job of the lineage becomes terminal (finished,
failed, cancelled, superseded: whatever ended it), each settling ancestor left with no live
descendant ends with its own recorded outcome (``job.settled``), settles its session's pointer
and ends its A2A task, so the caller's reply can never be lost between two commits.

A paused or suspended descendant is live: it comes back to work (and takes capacity again),
so it keeps its ancestor settling; cancelling it, or the settling job, ends the wait.
"""

from __future__ import annotations

from engine.domain import ids
from engine.domain import job as job_
from engine.domain.job import JobState as J
from engine.domain.rows import JobRow
from engine.domain.rules import pointer
from engine.domain.rules.registry import Context
from engine.domain.session import Owed

JOB_STREAM = ids.job("")


def complete_quiet_ancestors(ctx: Context) -> None:
    """End every settling ancestor of a job this command made terminal whose subtree is now
    quiet. Ancestors are walked to the top: a grandchild's end can be the last one."""
    for stream_id in ctx.touched:
        if not stream_id.startswith(JOB_STREAM) or ctx.head(stream_id).state not in job_.TERMINAL:
            continue
        ended = ctx.view.job(ids.entity_of(stream_id))
        parent_id = ended.parent_job if ended is not None else None
        while parent_id is not None:
            parent = ctx.view.job(parent_id)
            if parent is None:
                break
            if parent.state == J.SETTLING and not ctx.view.live_descendants(parent.job_id):
                complete(ctx, parent)
            parent_id = parent.parent_job


def complete(ctx: Context, job: JobRow) -> None:
    """End settling ``job`` as its run's finish recorded it: the job, its session's pointer
    and its A2A task, together."""
    outcome = job.outcome or "error"  # recorded by its finish; "error" only for a corrupt row
    ctx.append(ids.job(job.job_id), job_.JobSettled(outcome=outcome))
    pointer.settle(ctx, job.session_id, Owed("job", job.job_id))
    structured = job.contract_valid is True  # its finish's verdict (ADR 0065)
    pointer.end_task_of(ctx, job, outcome, job.result or "", job.warnings, job.files, structured)
