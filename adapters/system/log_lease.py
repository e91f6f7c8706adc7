"""The lease gate of a log on PostgreSQL: the log itself, no lease file (ADR 0026).

On SQLite the lease file beside the log is the gate hosts on a shared filesystem can trust, and
the lease stream is the record. On PostgreSQL the log is already the one place every host
writes through, one transaction at a time under the head row's lock, so the lease stream is
the gate as well: ``AcquireLease`` and ``TakeOverLease`` are judged and recorded atomically
there, a takeover raises the epoch that the head row carries, and every write of an older
epoch is refused under the same lock. There is nothing to claim, confirm or put right on the
side: this gate answers ``adapters.services.tenure`` from the lease row, with ``LeaseFile``'s
methods.
"""

from __future__ import annotations

from collections.abc import Callable

from adapters.system.leasefile import LeaseRecord
from engine.domain.engine import DomainEngine
from projections import queries


class LogLease:
    """``LeaseFile``'s interface over the log's own lease row."""

    def __init__(self, engine: Callable[[], DomainEngine], name: str) -> None:
        self._engine = engine
        self._name = name

    def read(self) -> LeaseRecord | None:
        """The holder and epoch of the lease while it is held; None when it is free."""
        held = queries.lease_held(self._engine().log.connection(), self._name)
        if held is None:
            return None
        return LeaseRecord(held.holder, held.epoch, "", 0, 0.0)

    def claim(self, record: LeaseRecord) -> bool:
        """Always granted here: ``AcquireLease`` in the log decides who gets a free lease."""
        return True

    def replace(self, record: LeaseRecord) -> None:
        """Nothing to write: the lease row is the record."""

    def remove(self, holder: str) -> None:
        """Nothing to remove: ``ReleaseLease`` in the log frees it."""

    def confirm_takeover(self, record: LeaseRecord, pause_s: float) -> bool:
        """Nothing to confirm on the side: the takeover is one transaction under the head
        row's lock, refused if the lease moved (the domain rule) or the epoch did (the fence)."""
        return True
