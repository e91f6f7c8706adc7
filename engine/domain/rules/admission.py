"""Admission (design.md §4.7): capacity per resource group, write scopes that may not overlap, and
which sessions take new work. Every check runs inside the write transaction, so it is exact:
a batch sees what its earlier items took."""

from __future__ import annotations

from collections.abc import Sequence

from engine.domain.errors import AdmissionRejected, Conflict
from engine.domain.rows import SessionRow
from engine.domain.rules.registry import Context
from engine.domain.session import SessionState as S
from engine.errors import InvalidArgument

# A session accepts new jobs and tasks only while it is doing work for callers.
ADMITTING = frozenset({S.STARTING, S.RUNNING, S.DETACHED})


def admit(ctx: Context, group: str | None, units: int) -> None:
    """Exact capacity check inside the write transaction (design.md §4.7)."""
    if group is None:
        return
    limit = ctx.settings.resource_groups.get(group)
    if limit is None:
        raise InvalidArgument(f"resource group {group!r} is not configured", resource_group=group)
    used = ctx.view.units_held(group)
    if used + units > limit:
        raise AdmissionRejected(
            f"resource group {group!r} is at capacity: {used}/{limit} units held, "
            f"{units} requested",
            reason="capacity",
            resource_group=group,
            used=used,
            limit=limit,
            requested=units,
        )


def overlaps(a: str, b: str) -> bool:
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    return a == b or a.startswith(b + "/") or b.startswith(a + "/") or "/" in (a, b)


def check_write_scope(ctx: Context, scopes: Sequence[str]) -> None:
    held = ctx.view.write_scopes_held()
    for path in scopes:
        for job_id, other in held:
            if overlaps(path, other):
                raise AdmissionRejected(
                    f"write scope {path!r} overlaps {other!r} held by job {job_id}",
                    reason="write_scope_conflict",
                    path=path,
                    held_by=job_id,
                    held_path=other,
                )


def admitting(session: SessionRow, what: str) -> None:
    """A tainted session, or one not doing work for callers, takes no new ``what``."""
    if session.tainted:
        raise Conflict(
            f"session {session.session_id} is tainted: it admits no new {what}",
            session_id=session.session_id,
        )
    if session.state not in ADMITTING:
        raise Conflict(
            f"session {session.session_id} is {session.state}: it admits no new {what}",
            session_id=session.session_id,
            state=session.state,
        )
