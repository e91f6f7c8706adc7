"""Push notification rules (ADR 0039): configs on an open task, and each delivery's attempts.

A delivery is claimed for one attempt by a server instance (``holder``) before it is sent, and
the claim runs out ``TIMEOUT_S + CLAIM_MARGIN_S`` later: after a ``kill -9`` the next server
(another holder) claims it again at once, so it is sent at least once more (receivers dedupe
by the delivery id sent with it). At most ``CONCURRENCY`` claims of one holder are live.
"""

from __future__ import annotations

from datetime import timedelta

from engine.clock import format_time, parse_time
from engine.domain import ids
from engine.domain import push as push_
from engine.domain.errors import Conflict, NotFound, TaskEnded
from engine.domain.rows import DeliveryRow
from engine.domain.rules import lookups
from engine.domain.rules.registry import Context, rule
from engine.domain.task import TERMINAL


@rule(push_.SetPushConfig)
def set_push_config(cmd: push_.SetPushConfig, ctx: Context) -> None:
    row = lookups.task_for(cmd, ctx)
    if row.state in TERMINAL:
        raise TaskEnded(f"task {row.task_id} is already {row.state}", task_id=row.task_id)
    config = push_.PushConfig(
        config_id=cmd.config_id,
        url=cmd.url,
        token=cmd.token,
        scheme=cmd.scheme,
        credentials=cmd.credentials,
        dialect=cmd.dialect,
    )
    ctx.append(ids.task(row.task_id), push_.TaskPushConfigSet(config=config))


@rule(push_.DeletePushConfig)
def delete_push_config(cmd: push_.DeletePushConfig, ctx: Context) -> None:
    row = lookups.task_for(cmd, ctx)
    if ctx.view.push_config(row.task_id, cmd.config_id) is None:
        raise NotFound(f"push config {cmd.config_id} not found", config_id=cmd.config_id)
    ctx.append(ids.task(row.task_id), push_.TaskPushConfigDeleted(config_id=cmd.config_id))


def _delivery(ctx: Context, delivery_id: str) -> DeliveryRow:
    row = ctx.view.delivery(delivery_id)
    if row is None:
        raise NotFound(f"delivery {delivery_id} not found", delivery_id=delivery_id)
    return row


@rule(push_.StartPushAttempt)
def start_push_attempt(cmd: push_.StartPushAttempt, ctx: Context) -> None:
    row = _delivery(ctx, cmd.delivery_id)
    now = ctx.now
    stamp = format_time(now)
    claimable = (
        row.progress == "queued"
        or (row.progress == "waiting" and row.due_at <= stamp)
        or (
            row.progress == "sending"
            and (row.holder != cmd.holder or (row.claim_until or "") <= stamp)
        )
    )
    if not claimable:
        raise Conflict(f"delivery {row.delivery_id} is not due", delivery_id=row.delivery_id)
    if ctx.view.deliveries_claimed(cmd.holder, stamp) >= push_.CONCURRENCY:
        raise Conflict(
            f"{push_.CONCURRENCY} deliveries are under way already", delivery_id=row.delivery_id
        )
    until = now + timedelta(seconds=push_.TIMEOUT_S + push_.CLAIM_MARGIN_S)
    ctx.append(
        ids.push(row.delivery_id),
        push_.PushAttemptStarted(
            attempt=row.attempts + 1, holder=cmd.holder, until=format_time(until)
        ),
    )


@rule(push_.RecordPushOutcome)
def record_push_outcome(cmd: push_.RecordPushOutcome, ctx: Context) -> None:
    row = _delivery(ctx, cmd.delivery_id)
    if row.progress != "sending" or row.attempts != cmd.attempt or row.holder != cmd.holder:
        raise Conflict(  # claimed again since (its claim ran out): that attempt records
            f"attempt {cmd.attempt} of delivery {row.delivery_id} is not the current one",
            delivery_id=row.delivery_id,
        )
    stream = ids.push(row.delivery_id)
    if 200 <= cmd.status < 300 and not cmd.refused:
        ctx.append(stream, push_.PushDelivered(attempt=cmd.attempt, status=cmd.status))
        return
    delay = push_.retry_delay_s(cmd.attempt, cmd.jitter)
    reason = _gives_up(cmd, row, ctx, delay)
    if reason is not None:
        ctx.append(
            stream,
            push_.PushDead(attempt=cmd.attempt, status=cmd.status, error=cmd.error, reason=reason),
        )
        return
    retry_at = ctx.now + timedelta(seconds=delay)
    ctx.append(
        stream,
        push_.PushFailed(
            attempt=cmd.attempt,
            status=cmd.status,
            error=cmd.error,
            retry_at=format_time(retry_at),
        ),
    )


def _gives_up(
    cmd: push_.RecordPushOutcome, row: DeliveryRow, ctx: Context, delay: float
) -> str | None:
    """Why a failed attempt ends the delivery, or None to retry after ``delay`` seconds."""
    if cmd.refused:
        return "the URL was refused"
    if push_.is_final(cmd.status):
        return f"the receiver answered {cmd.status}"
    if cmd.attempt >= push_.MAX_ATTEMPTS:
        return f"{push_.MAX_ATTEMPTS} attempts failed"
    if _age_s(row, ctx) + delay >= push_.MAX_AGE_S:  # no /ping kept busy for a try not made
        return "the next try would fall past the maximum age"
    return None


def _age_s(row: DeliveryRow, ctx: Context) -> float:
    return (ctx.now - parse_time(row.at)).total_seconds()


@rule(push_.ExpirePush)
def expire_push(cmd: push_.ExpirePush, ctx: Context) -> None:
    row = _delivery(ctx, cmd.delivery_id)
    if row.progress != "waiting" or _age_s(row, ctx) < push_.MAX_AGE_S:
        raise Conflict(f"delivery {row.delivery_id} is not expired", delivery_id=row.delivery_id)
    ctx.append(
        ids.push(row.delivery_id),
        push_.PushDead(
            attempt=row.attempts,
            status=row.last_status or 0,
            error=row.last_error or "",
            reason="older than the maximum age",
        ),
    )
