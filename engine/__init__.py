"""foldline's generic core: events, machines, the log, its projections and the command API.
No HTTP, no subprocesses, and no built-in domain (that is ``engine.domain``)."""

from engine.clock import Clock, FixedClock, SystemClock
from engine.engine import CommandResult, Context, Engine
from engine.errors import (
    ChainBroken,
    ConcurrencyError,
    EngineError,
    FencedOut,
    InvalidArgument,
    InvalidDeclaration,
    InvalidEvent,
    InvalidTransition,
    LogMissing,
    NotALog,
    PayloadTooLarge,
    SchemaTooNew,
    StorageError,
    UnknownEventType,
    UnknownStreamKind,
)
from engine.events import Event, RecordedEvent
from engine.log import AppendResult, Log, Transaction, open_log
from engine.machines import ANY, LIVE, NEW, Machine, Machines, MachineSpec, StreamHead, Transition
from engine.notifier import Notifier, open_notifier
from engine.projection import DispatchProjection, Projection, handles

__all__ = [
    "ANY",
    "LIVE",
    "NEW",
    "AppendResult",
    "ChainBroken",
    "Clock",
    "CommandResult",
    "ConcurrencyError",
    "Context",
    "DispatchProjection",
    "Engine",
    "EngineError",
    "Event",
    "FencedOut",
    "FixedClock",
    "InvalidArgument",
    "InvalidDeclaration",
    "InvalidEvent",
    "InvalidTransition",
    "Log",
    "LogMissing",
    "Machine",
    "MachineSpec",
    "Machines",
    "NotALog",
    "Notifier",
    "PayloadTooLarge",
    "Projection",
    "RecordedEvent",
    "SchemaTooNew",
    "StorageError",
    "StreamHead",
    "SystemClock",
    "Transaction",
    "Transition",
    "UnknownEventType",
    "UnknownStreamKind",
    "handles",
    "open_log",
    "open_notifier",
]
