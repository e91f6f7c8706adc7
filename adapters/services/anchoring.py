"""The log's anchor as the lease holder keeps it (ADR 0029; the file: ``system.log_anchor``).

Judged when this process opens the log: a log that does not extend its anchor is refused
(``log_missing``), unless it is the one anchor ``--new-log`` may replace, which is then
recorded as lost (``lease.new_log``) once the lease is held. Written at the log's head once
per tenure and process (``hold``), at every renewal and at release (``write``). None of it for
a PostgreSQL log (no file to anchor).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from adapters.services.tenure import Tenure
from adapters.settings.config import ServerConfig
from adapters.system import log_anchor
from engine.audit.anchor import ServerAnchor
from engine.domain.engine import DomainEngine

log = logging.getLogger("foldline.runtime")


class Anchoring:
    """This server's anchor of its log (``path``; None for a PostgreSQL log), over this
    process's engine, at the epoch of ``tenure``."""

    def __init__(
        self,
        config: ServerConfig,
        holder: str,
        engine: Callable[[], DomainEngine],
        tenure: Tenure,
    ) -> None:
        self.path = (
            log_anchor.anchor_file(config.state_dir, config.db) if config.db_url is None else None
        )
        self._db = config.db
        self._holder = holder
        self._engine = engine
        self._tenure = tenure
        # --new-log replaces only the anchor the server found at boot, never a later one.
        self._replaceable = log_anchor.read(self.path) if config.new_log and self.path else None
        self._lost: ServerAnchor | None = None  # to record as lease.new_log once we hold it
        self._anchored_epoch: int | None = None
        self._lock = threading.RLock()

    def read(self) -> ServerAnchor | None:
        """The anchor on file, None before the first (or for a PostgreSQL log)."""
        return log_anchor.read(self.path) if self.path else None

    def refuse_unless_replaceable(self, anchor: ServerAnchor, reason: str) -> None:
        """The log does not extend ``anchor`` (``reason``): refused, unless ``anchor`` is the
        one ``--new-log`` replaces, which is then owed as lost.

        Raises:
            LogMissing: the log is refused.
        """
        if anchor != self._replaceable:
            assert self.path is not None
            raise log_anchor.refusal(anchor, reason, self.path)
        self._lost = anchor

    def forget(self) -> None:
        """A log opened anew in this process is anchored anew by its first tenure."""
        self._anchored_epoch = None

    def hold(self) -> None:
        """Once per tenure and process, the lease just held: record a lost anchor
        (``--new-log``), then anchor the head."""
        if self._anchored_epoch == self._tenure.epoch or self.path is None:
            return
        with self._lock:  # once per tenure and process, not once per waiting request
            if self._anchored_epoch == self._tenure.epoch:
                return
            if self._lost is not None:  # forgotten only once recorded (a refusal tries again)
                command = log_anchor.new_log_command(
                    self._lost, self._holder, self._tenure.epoch or 0
                )
                self._engine().handle(command)
                self._lost = None
            self.write()

    def write(self) -> None:
        """Keep the anchor at the log's head (after taking the lease, each renewal, release)."""
        if self.path is None:
            return
        head = log_anchor.head_of(self._engine().log.connection(), self._db)
        if head is not None:
            try:
                with self._lock:
                    log_anchor.write(self.path, head)
            except OSError as ex:  # a full state disk: the next renewal writes it again
                log.error("the log's anchor %s was not written: %s", self.path, ex)
                return
        self._anchored_epoch = self._tenure.epoch
