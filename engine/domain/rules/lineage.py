"""Lineage (design.md §4.4): a job's parent and depth, and cancellation that reaches every live
descendant."""

from __future__ import annotations

from engine.domain import ids
from engine.domain import job as job_
from engine.domain.errors import AdmissionRejected, Conflict
from engine.domain.job import JobState as J
from engine.domain.rows import JobRow
from engine.domain.rules import lookups, pointer
from engine.domain.rules.registry import Context
from engine.domain.session import Owed

# A job may spawn children only while it is itself live and not on its way out.
SPAWNING = frozenset({J.QUEUED, J.RUNNING})


def depth_below(ctx: Context, session_id: str, parent_job: str | None) -> int:
    """The depth of a new job: 1 at the top, its parent's + 1 below a live parent of the same
    session, refused past ``max_depth``."""
    if parent_job is None:
        return 1
    parent = lookups.job(ctx, parent_job)
    if parent.session_id != session_id or parent.state not in SPAWNING:
        raise Conflict(
            f"job {parent.job_id} ({parent.state}, session {parent.session_id}) cannot spawn here",
            job_id=parent.job_id,
        )
    depth = parent.depth + 1
    if depth > ctx.settings.max_depth:
        raise AdmissionRejected(
            f"depth {depth} exceeds {ctx.settings.max_depth}",
            reason="depth",
            depth=depth,
            limit=ctx.settings.max_depth,
        )
    return depth


def cancel_one(ctx: Context, job: JobRow, reason: str) -> None:
    if job.state in (J.RUNNING, J.CANCELLING):  # its runner confirms once the process is gone
        ctx.append(ids.job(job.job_id), job_.JobCancelRequested(reason=reason))
        return
    ctx.append(ids.job(job.job_id), job_.JobCancelled(reason=reason))
    pointer.settle(ctx, job.session_id, Owed("job", job.job_id))


def cancel_with_descendants(ctx: Context, job: JobRow, reason: str) -> None:
    descendants = ctx.view.live_descendants(job.job_id)
    cancel_one(ctx, job, reason)  # refused by the machine if it is terminal
    for child in descendants:
        cancel_one(ctx, child, reason or f"ancestor {job.job_id} cancelled")
