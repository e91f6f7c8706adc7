"""Lease: a single-writer tenure over the workspace (design.md §4.2). Stream ``lease:<name>``.

A lease whose stream does not exist yet is *free*: ``lease.acquired`` creates the stream. Every
tenure gets the next epoch; the log refuses appends carrying an older one (ADR 0008).
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

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


class LostLog(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the server's anchor last saw of a log that is gone: its file and its head."""

    db: str
    device: int
    inode: int
    position: int
    hash: str
    recorded_at: str


class LeaseNewLog(Event, tag="lease.new_log", frozen=True, kw_only=True):
    """The holder started this log where its anchor said a log with history had been
    (``foldline serve --new-log``), naming the log it lost."""

    holder: str
    epoch: int
    lost: LostLog


class LeaseCheckpointSigned(Event, tag="lease.checkpoint_signed", frozen=True, kw_only=True):
    """The holder signed a checkpoint of the log's first ``size`` events (everything before
    this event) with the key named ``origin`` (ADR 0040); ``note`` is the signed note."""

    holder: str
    epoch: int
    origin: str
    size: int
    root: str  # the tree head, standard base64
    note: str


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
        Transition(LeaseCheckpointSigned, [LeaseState.HELD]),
        Transition(LeaseReleased, [LeaseState.HELD], LeaseState.RELEASED),
    ],
)
