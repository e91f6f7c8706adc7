"""The errors every user of the log meets, under one root.

Every error carries a stable string ``code`` (callers and the HTTP adapter match on it, never
on the message) and its structured fields as attributes. Where a stdlib error means the same
thing, the class also subclasses it, so ``except ValueError`` keeps working for embedders.
The built-in domain's own refusals (not found, conflict, admission, ...) live in
``engine.domain.errors`` and subclass ``EngineError`` like these.
"""

from __future__ import annotations

from typing import Any, ClassVar


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""

    code: ClassVar[str] = "engine_error"

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields
        for name, value in fields.items():
            setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """The error as a JSON-ready mapping: code, message and fields."""
        return {"code": self.code, "message": self.message, **self.fields}


class InvalidArgument(EngineError, ValueError):
    """A caller passed something malformed; nothing was written."""

    code = "invalid_argument"


class InvalidEvent(InvalidArgument):
    """An event does not match its declared schema (wrong field types, constraints)."""

    code = "invalid_event"


class PayloadTooLarge(InvalidArgument):
    """An encoded event is larger than the log accepts."""

    code = "payload_too_large"


class UnknownStreamKind(InvalidArgument, LookupError):
    """A stream id names a kind for which no machine is declared."""

    code = "unknown_stream_kind"


class UnknownEventType(InvalidArgument, LookupError):
    """An event type that the stream's machine does not declare."""

    code = "unknown_event_type"


class OutOfRange(InvalidArgument, LookupError):
    """A position or a tree size the log does not hold (a proof asked of ``/v1/proofs``)."""

    code = "out_of_range"


class InvalidDeclaration(EngineError, ValueError):
    """A machine declaration is inconsistent (unknown states, missing tags, ...)."""

    code = "invalid_declaration"


class ConcurrencyError(EngineError):
    """The stream head is not at ``expected``; nothing was appended."""

    code = "version_conflict"

    def __init__(self, stream_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"{stream_id}: expected version {expected}, stream is at {actual}",
            stream_id=stream_id,
            expected=expected,
            actual=actual,
        )


class InvalidTransition(EngineError):
    """The stream's machine does not allow ``event_type`` from ``state``; nothing was appended."""

    code = "invalid_transition"

    def __init__(
        self, stream_id: str, state: str | None, event_type: str, reason: str = ""
    ) -> None:
        where = "a new stream" if state is None else f"state {state!r}"
        detail = f" ({reason})" if reason else ""
        super().__init__(
            f"{stream_id}: {event_type} is not allowed from {where}{detail}",
            stream_id=stream_id,
            state=state,
            event_type=event_type,
            reason=reason,
        )


class MissingGuard(InvalidTransition):
    """A recorded declaration names a guard the code no longer has (ADR 0060): the event it
    would judge cannot be judged. Raised by audits only, never by an append."""

    code = "missing_guard"


class FencedOut(EngineError):
    """The writer's epoch is older than the newest epoch in the log."""

    code = "fenced_out"

    def __init__(self, epoch: int, current_epoch: int) -> None:
        super().__init__(
            f"epoch {epoch} is fenced out: the log is at epoch {current_epoch}",
            epoch=epoch,
            current_epoch=current_epoch,
        )


class SchemaTooNew(EngineError):
    """The file was written by a newer release; this release refuses to touch it."""

    code = "schema_too_new"

    def __init__(self, path: str, found: int, supported: int) -> None:
        super().__init__(
            f"{path}: schema version {found} is newer than this release supports ({supported}); "
            "upgrade foldline to open it",
            path=path,
            found=found,
            supported=supported,
        )


class NotALog(EngineError):
    """The file is not a SQLite database, or not one written by foldline."""

    code = "not_a_log"


class StorageError(EngineError, OSError):
    """SQLite failed underneath the engine (disk full, I/O error, locked past the timeout)."""

    code = "storage_error"


class StorageFull(StorageError):
    """The disk (or the database server's) has no room for the write; nothing was appended.
    It passes by itself once space is freed: the next write may succeed."""

    code = "storage_full"


class LogMissing(StorageError):
    """The file at the log's path is not the log this process writes (deleted, moved or
    replaced under it), or a log with recorded history is gone: nothing more is written."""

    code = "log_missing"


class ChainBroken(EngineError):
    """The hash chain does not verify: history was edited, removed, inserted or reordered."""

    code = "chain_broken"


class NeedsMigration(EngineError):
    """A read-only open found a file that must be migrated or refolded first."""

    code = "needs_migration"
