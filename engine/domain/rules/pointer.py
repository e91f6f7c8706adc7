"""The reply pointer (design.md §4.6): a session owes at most one thing, a job, an A2A task or a
relay report, and the owed entity's terminal write settles it.

Only an ``/invocations`` job takes the pointer as a job (``AcceptJob(owed=True)``); a worker
spawned by a run or the operator, and the job of an A2A message, never do. Any later claim on
the session supersedes the running job it points at, so a job that finishes while pointed at
is the reply its caller was owed, and its finish records that by settling the pointer in the
same commit (``is_owed_reply``): what the notify hook runs for (design.md §9).
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.domain import ids
from engine.domain import job as job_
from engine.domain import session as session_
from engine.domain.errors import Conflict
from engine.domain.job import JobState as J
from engine.domain.rows import SessionRow
from engine.domain.rules.registry import Context
from engine.domain.session import Owed
from engine.events import Event

SUPERSEDABLE = frozenset({J.QUEUED, J.RUNNING, J.PAUSED, J.SUSPENDED})


def settle(ctx: Context, session_id: str, owed: Owed) -> None:
    """Clear the reply pointer if the session owes exactly this (after the terminal write)."""
    row = ctx.view.session(session_id)
    if row is not None and row.owes == owed and row.state not in session_.TERMINAL:
        ctx.append(ids.session(session_id), session_.SessionSettled(owed=owed))


def is_owed_reply(job_id: str, events: Iterable[Event]) -> bool:
    """Whether ``events``, the ones the commit that ended job ``job_id`` appended, settled its
    session's pointer at that job: the job's end is the reply an ``/invocations`` caller was
    owed. A pure reading of recorded events, so any later reader decides the same."""
    owed = Owed("job", job_id)
    return any(isinstance(e, session_.SessionSettled) and e.owed == owed for e in events)


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
