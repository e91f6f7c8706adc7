"""Refusals on the record (ADR 0065): the one rule of a session's audit stream."""

from __future__ import annotations

from engine.domain import ids
from engine.domain.refusals import AuditRefused, AuditRepeated, RecordRefusal
from engine.domain.rules.registry import Context, rule


@rule(RecordRefusal)
def record_refusal(cmd: RecordRefusal, ctx: Context) -> None:
    """One ``audit.refused``, or an ``audit.repeated`` for a coalesced burst (``count``).
    It reads nothing and refuses nothing: the refusal it records was decided already, and
    nothing but the audit stream is touched."""
    stream = ids.audit(cmd.session_id)
    if cmd.count:
        repeated = AuditRepeated(
            action=cmd.action,
            control=cmd.control,
            code=cmd.code,
            caller=cmd.caller,
            target=cmd.target,
            count=cmd.count,
        )
        ctx.append(stream, repeated)
        return
    refused = AuditRefused(
        action=cmd.action,
        control=cmd.control,
        code=cmd.code,
        status=cmd.status,
        message=cmd.message,
        caller=cmd.caller,
        target=cmd.target,
        agent=cmd.agent,
        route=cmd.route,
        limits=dict(cmd.limits),
    )
    ctx.append(stream, refused)
