"""Lease: a single-writer tenure over the workspace (SPEC §4.2). Stream ``lease:<name>``.

A lease whose stream does not exist yet is *free*: ``lease.acquired`` creates the stream. Every
tenure gets the next epoch; the log refuses appends carrying an older one (ADR 0008).
"""

from __future__ import annotations

from enum import StrEnum

from engine.events import Event
from engine.machines import NEW, MachineSpec, Transition


class LeaseState(StrEnum):
    HELD = "held"
    RELEASED = "released"


class LeaseAcquired(Event, tag="lease.acquired", frozen=True, kw_only=True):
    holder: str
    host: str = ""
    pid: int = 0
    epoch: int


class LeaseRenewed(Event, tag="lease.renewed", frozen=True, kw_only=True):
    holder: str
    epoch: int


class LeaseTakenOver(Event, tag="lease.taken_over", frozen=True, kw_only=True):
    holder: str
    host: str = ""
    pid: int = 0
    epoch: int
    previous_holder: str
    previous_epoch: int


class LeaseReleased(Event, tag="lease.released", frozen=True, kw_only=True):
    holder: str
    epoch: int


class LeaseNewLog(Event, tag="lease.new_log", frozen=True, kw_only=True):
    """The holder started this log where its anchor said a log with history had been
    (``foldline serve --new-log``): the lost log's last anchored position, hash and file."""

    holder: str
    epoch: int
    lost_db: str
    lost_position: int
    lost_hash: str
    lost_recorded_at: str
    lost_device: int
    lost_inode: int


LEASE = MachineSpec(
    kind="lease",
    description="Single-writer tenure over the workspace; a missing stream is a free lease.",
    states=list(LeaseState),
    initial=LeaseState.HELD,
    terminal=frozenset(),
    transitions=[
        Transition(LeaseAcquired, NEW, LeaseState.HELD),
        Transition(LeaseAcquired, [LeaseState.RELEASED], LeaseState.HELD),
        Transition(LeaseRenewed, [LeaseState.HELD]),
        Transition(LeaseTakenOver, [LeaseState.HELD]),
        Transition(LeaseNewLog, [LeaseState.HELD]),
        Transition(LeaseReleased, [LeaseState.HELD], LeaseState.RELEASED),
    ],
)
