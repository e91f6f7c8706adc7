"""The reply pointer (design.md §4.6): a session owes at most one thing, a job, an A2A task or a
relay report, and the owed entity's terminal write settles it.

Only an ``/invocations`` job takes the pointer as a job (``AcceptJob(owed=True)``); a worker
spawned by a run or the operator, and the job of an A2A message, never do. Any later claim on
the session supersedes the running job it points at, so a job that finishes while pointed at
is the reply its caller was owed, and its end records that by settling the pointer in the
same commit (``is_owed_reply``): what the notify hook runs for (design.md §9). That end is the
finish of its run, or, for a job whose run ended while jobs of its subtree were live, the
commit that ended the last of them (the quiet gate, ADR 0050): ``owed_replies`` reads either
from the commit's recorded events.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.domain import ids
from engine.domain import job as job_
from engine.domain import session as session_
from engine.domain import task as task_
from engine.domain.errors import Conflict, SessionMoved
from engine.domain.job import FileEntry
from engine.domain.job import JobState as J
from engine.domain.rows import DomainView, JobRow, SessionRow
from engine.domain.rules.registry import Context
from engine.domain.session import Owed
from engine.events import Event, RecordedEvent

SUPERSEDABLE = frozenset({J.QUEUED, J.RUNNING, J.PAUSED, J.SUSPENDED, J.SETTLING})
REPLIED = frozenset({J.OK, J.ERROR})  # the ends that are a reply (never a supersede or cancel)


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


def owed_replies(recorded: Iterable[RecordedEvent]) -> list[str]:
    """The jobs whose end, in the commit that appended ``recorded``, is the reply a caller
    was owed: each reached ``ok`` or ``error`` in it and its session's pointer was settled at
    it in it (``is_owed_reply``). A run's finish names its own job; the end of a settling
    job's last live descendant names that settling job (ADR 0050)."""
    events = list(recorded)
    ended = {
        ids.entity_of(e.stream_id)
        for e in events
        if e.stream_id.startswith(ids.job("")) and e.state in REPLIED
    }
    settled = [
        e.event.owed.ref
        for e in events
        if isinstance(e.event, session_.SessionSettled) and e.event.owed.kind == "job"
    ]
    return [job_id for job_id in settled if job_id in ended]


def end_task_of(
    ctx: Context,
    job: JobRow,
    outcome: str,
    text: str,
    warnings: tuple[str, ...] = (),
    files: tuple[FileEntry, ...] = (),
    structured: bool = False,
) -> None:
    """The job worked for an A2A task: its end is the task's end, in the same transaction;
    a completed task carries the job's ``MEDIA:`` files (its result artifact's file parts),
    and whether its text is JSON its contract accepted (``structured``, ADR 0065)."""
    task = ctx.view.task(job.task_id) if job.task_id else None
    if task is None or task.state in task_.TERMINAL:
        return
    if outcome == "ok" and task.state == task_.TaskState.AUTH_REQUIRED:
        return  # its run asked for authorization (ADR 0054): the next message starts another
    event: Event = (
        task_.TaskCompleted(result=text, warnings=warnings, files=files, structured=structured)
        if outcome == "ok"
        else task_.TaskFailed(text=text)
    )
    ctx.append(ids.task(task.task_id), event)
    settle(ctx, task.session_id, Owed("a2a", task.task_id))


def is_owed(ctx: Context, job: JobRow) -> bool:
    """Whether ``job``'s end is owed to a caller: its session's pointer names it (an
    ``/invocations`` job), or it works for an A2A task still open."""
    session = ctx.view.session(job.session_id)
    if session is not None and session.owes == Owed("job", job.job_id):
        return True
    task = ctx.view.task(job.task_id) if job.task_id else None
    return task is not None and task.state not in task_.TERMINAL


def superseded_by_next(view: DomainView, session: SessionRow) -> JobRow | None:
    """The job a new owed job on ``session`` supersedes: the one it owes, if still live."""
    owes = session.owes
    earlier = view.job(owes.ref) if owes is not None and owes.kind == "job" else None
    return earlier if earlier is not None and earlier.state in SUPERSEDABLE else None


def check_covers(ctx: Context, session: SessionRow, covers: tuple[str, ...] | None) -> None:
    """A new owed job whose run gets the prompts of the job it supersedes (``covers`` not
    None: it folds) covers exactly that job's covers and then that job (ADR 0048); one that
    does not fold covers nothing. The caller planned ``covers`` from the committed log
    before spawning the run: this is the check, in the write, that the plan still holds, so
    a prompt is neither lost nor answered twice when the run's finish (or another prompt)
    got there first.

    Raises:
        SessionMoved: the session's owed job is no longer the one planned for.
    """
    earlier = superseded_by_next(ctx.view, session) if covers is not None else None
    expected = () if earlier is None else (*earlier.covers, earlier.job_id)
    planned = covers or ()
    if planned != expected:
        raise SessionMoved(
            f"session {session.session_id} moved: the new job would cover"
            f" {', '.join(expected) or 'no job'}, not {', '.join(planned) or 'no job'}",
            session_id=session.session_id,
        )


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
