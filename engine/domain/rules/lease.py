"""Lease tenure (design.md §4.2): acquire, renew, take over a stale lease, release. Each tenure gets
the next epoch, which the log uses to fence older writers out."""

from __future__ import annotations

from typing import Protocol

from engine.clock import parse_time
from engine.domain import commands as c
from engine.domain import ids
from engine.domain import lease as lease_
from engine.domain.errors import LeaseBusy, NotLeaseHolder
from engine.domain.lease import LeaseState
from engine.domain.rules.registry import Context, rule
from engine.errors import InvalidTransition
from engine.events import Event


def next_epoch(ctx: Context, current: int) -> int:
    # Epochs are global to the log: the fence compares with the newest epoch of any stream.
    return max(current, ctx.log_epoch) + 1


@rule(c.AcquireLease)
def acquire_lease(cmd: c.AcquireLease, ctx: Context) -> None:
    row = ctx.view.lease(cmd.name)
    if row is not None and row.state == LeaseState.HELD:
        raise LeaseBusy(
            f"lease {cmd.name} is held by {row.holder} (epoch {row.epoch})",
            holder=row.holder,
            epoch=row.epoch,
        )
    epoch = next_epoch(ctx, row.epoch if row else 0)
    ctx.append(
        ids.lease(cmd.name),
        lease_.LeaseAcquired(holder=cmd.holder, host=cmd.host, pid=cmd.pid, epoch=epoch),
        epoch=epoch,
    )


def held_by(ctx: Context, name: str, holder: str, epoch: int) -> None:
    row = ctx.view.lease(name)
    if row is None or row.state != LeaseState.HELD or (row.holder, row.epoch) != (holder, epoch):
        raise NotLeaseHolder(
            f"{holder} does not hold lease {name} at epoch {epoch}",
            holder=row.holder if row else None,
            epoch=row.epoch if row else None,
        )


class ByHolder(Protocol):
    """A command only the lease's current holder may give, at its epoch."""

    @property
    def name(self) -> str: ...
    @property
    def holder(self) -> str: ...
    @property
    def epoch(self) -> int: ...


def append_as_holder(ctx: Context, cmd: ByHolder, event: Event) -> None:
    """Append ``event`` to the lease's stream if ``cmd`` comes from its holder, fenced by the
    holder's epoch so that a deposed holder's late write is refused by the log itself."""
    held_by(ctx, cmd.name, cmd.holder, cmd.epoch)
    ctx.append(ids.lease(cmd.name), event, epoch=cmd.epoch)


@rule(c.RenewLease)
def renew_lease(cmd: c.RenewLease, ctx: Context) -> None:
    append_as_holder(ctx, cmd, lease_.LeaseRenewed(holder=cmd.holder, epoch=cmd.epoch))


@rule(c.TakeOverLease)
def take_over_lease(cmd: c.TakeOverLease, ctx: Context) -> None:
    row = ctx.view.lease(cmd.name)
    if row is None or row.state != LeaseState.HELD:
        raise InvalidTransition(
            ids.lease(cmd.name),
            row.state if row else None,
            "lease.taken_over",
            "the lease is free: acquire it",
        )
    age = (ctx.now - parse_time(row.renewed_at)).total_seconds()
    if age <= ctx.settings.lease_stale_s:
        raise LeaseBusy(
            f"lease {cmd.name} is held by {row.holder} (renewed {age:.1f} s ago, stale after "
            f"{ctx.settings.lease_stale_s:g} s)",
            holder=row.holder,
            epoch=row.epoch,
            age_s=age,
        )
    epoch = next_epoch(ctx, row.epoch)
    ctx.append(
        ids.lease(cmd.name),
        lease_.LeaseTakenOver(
            holder=cmd.holder,
            host=cmd.host,
            pid=cmd.pid,
            epoch=epoch,
            previous_holder=row.holder,
            previous_epoch=row.epoch,
        ),
        epoch=epoch,
    )


@rule(c.ReleaseLease)
def release_lease(cmd: c.ReleaseLease, ctx: Context) -> None:
    append_as_holder(ctx, cmd, lease_.LeaseReleased(holder=cmd.holder, epoch=cmd.epoch))


@rule(c.RecordNewLog)
def record_new_log(cmd: c.RecordNewLog, ctx: Context) -> None:
    append_as_holder(
        ctx, cmd, lease_.LeaseNewLog(holder=cmd.holder, epoch=cmd.epoch, lost=cmd.lost)
    )


@rule(c.RecordCheckpoint)
def record_checkpoint(cmd: c.RecordCheckpoint, ctx: Context) -> None:
    signed = lease_.LeaseCheckpointSigned(
        holder=cmd.holder,
        epoch=cmd.epoch,
        origin=cmd.origin,
        size=cmd.size,
        root=cmd.root,
        note=cmd.note,
    )
    append_as_holder(ctx, cmd, signed)
