"""The reply pointer (design.md §4.6): a session owes at most one thing, a job, an A2A task or a
relay report, and the owed entity's terminal write settles it."""

from __future__ import annotations

from engine.domain import ids
from engine.domain import job as job_
from engine.domain import session as session_
from engine.domain.errors import Conflict
from engine.domain.job import JobState as J
from engine.domain.rows import SessionRow
from engine.domain.rules.registry import Context
from engine.domain.session import Owed

SUPERSEDABLE = frozenset({J.QUEUED, J.RUNNING, J.PAUSED, J.SUSPENDED})


def settle(ctx: Context, session_id: str, owed: Owed) -> None:
    """Clear the reply pointer if the session owes exactly this (after the terminal write)."""
    row = ctx.view.session(session_id)
    if row is not None and row.owes == owed and row.state not in session_.TERMINAL:
        ctx.append(ids.session(session_id), session_.SessionSettled(owed=owed))


def take(ctx: Context, session: SessionRow, owed: Owed) -> None:
    """Supersede an owed job, refuse over an A2A task or relay, then point."""
    current = session.owes
    if current is not None and current.kind in ("a2a", "relay"):
        what = "an A2A task" if current.kind == "a2a" else "a relay report"
        raise Conflict(
            f"session {session.session_id} owes {what} ({current.ref}); it takes no new "
            f"{'job' if owed.kind == 'job' else owed.kind} until that is settled",
            session_id=session.session_id,
            owes=current.kind,
            ref=current.ref,
        )
    if current is not None and current.kind == "job":
        earlier = ctx.view.job(current.ref)
        # A job already being cancelled is on its way out: the pointer just moves on.
        if earlier is not None and earlier.state in SUPERSEDABLE:
            by = owed.ref if owed.kind == "job" else f"{owed.kind}:{owed.ref}"
            ctx.append(ids.job(earlier.job_id), job_.JobSuperseded(superseded_by=by))
    ctx.append(ids.session(session.session_id), session_.SessionOwes(owed=owed))
