"""One server process's view of foldline: the engine, opened lazily, and the parts that use it.

Each gunicorn worker builds its own engine on first need (never before fork, never for
``/ping``: SPEC §4.2's lazy activation). All workers of one ``foldline serve`` share a lease
holder name, so the lease belongs to the server instance: the first request that writes takes
it, and the others of the same instance find it theirs.

- ``tenure`` (adapters.tenure): the lease, and the epoch writes carry;
- ``jobs`` (adapters.dispatch): starting runs, and this process's in-flight work;
- recovery (adapters.recovery) runs when the tenure is taken, through a narrow port.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from adapters import recovery
from adapters.config import ServerConfig
from adapters.dispatch import Dispatcher
from adapters.operator_token import OperatorToken
from adapters.tenure import Tenure
from engine import open_notifier
from engine.clock import Clock
from engine.domain.engine import DomainEngine
from engine.domain.rules import Settings
from engine.notifier import Notifier
from projections import open_engine


class Runtime:
    def __init__(self, config: ServerConfig, holder: str, clock: Clock | None = None) -> None:
        self.config = config
        self.holder = holder
        self.clock = clock  # None: the system clock; tests inject one to move time
        self.started_at = time.time()
        self._pid = -1
        self._engine: DomainEngine | None = None
        self._notifier: Notifier | None = None
        self._open_lock = threading.Lock()
        self.shutdown = threading.Event()
        self.operator_token = OperatorToken(config)
        self.graces = recovery.Graces(config.start_grace_s, config.transition_grace_s)
        self.jobs = Dispatcher(config, lambda: self.engine, self.shutdown)
        self.tenure = Tenure(
            config,
            holder,
            engine=lambda: self.engine,
            recover=self._recover,
            is_recovered=lambda: recovery.is_recovered(self.engine),
            on_renewed=lambda: recovery.record_timeouts(self.engine, self.graces),
            stopping=self.shutdown,
        )
        self.open_streams = 0
        self._streams_lock = threading.Lock()

    # -- the engine, per process -------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """Whether this process has opened the log (nothing under the workspace before)."""
        return self._engine is not None and self._pid == os.getpid()

    @property
    def engine(self) -> DomainEngine:
        if not self.is_open:
            with self._open_lock:
                if not self.is_open:
                    # First activation makes the operator token (unless FOLDLINE_TOKEN is
                    # set) before the log, so no run can exist without one.
                    self.operator_token.ensure()
                    self._engine = open_engine(
                        self.config.log_target,
                        Settings(
                            resource_groups=self.config.resource_groups,
                            lease_stale_s=self.config.lease_stale_s,
                            agents=self.config.agents.policies,
                            max_depth=self.config.agents.max_depth,
                            max_active_agents=self.config.agents.max_active_agents,
                            max_active_writers=self.config.agents.max_active_writers,
                        ),
                        clock=self.clock,
                        sync=self.config.sync,  # type: ignore[arg-type]
                    )
                    self._notifier = open_notifier(self._engine.log)
                    self._pid = os.getpid()
                    self.tenure.forget()
        assert self._engine is not None
        return self._engine

    def close(self) -> None:
        """Stop: cut off the runs of this process (they stay recorded as running, for recovery),
        then close the notifier and the log."""
        self.shutdown.set()
        self.jobs.join(timeout_s=10)
        if self._notifier is not None and self._pid == os.getpid():
            self._notifier.stop()
        if self.is_open:
            self._engine.log.close()  # type: ignore[union-attr]
        self._engine = None

    @contextlib.contextmanager
    def open_stream(self) -> Iterator[None]:
        """Count an open SSE stream for the metrics while the block runs."""
        with self._streams_lock:
            self.open_streams += 1
        try:
            yield
        finally:
            with self._streams_lock:
                self.open_streams -= 1

    # -- the lease ---------------------------------------------------------------------------

    def _recover(self) -> None:
        recovery.recover(self.engine, self.jobs.resume, self.graces)

    def lease_holder(self) -> tuple[str, int] | None:
        """The instance holding the lease and its epoch, per the log (None if free)."""
        return self.tenure.current_holder()

    def ensure_lease(self) -> None:
        """Hold the workspace lease before writing (see ``Tenure.ensure``)."""
        self.tenure.ensure()

    def release_lease(self) -> None:
        """Graceful stop: give the lease back if this instance holds it. The lease file is
        read first, so a server that never wrote opens nothing (the gunicorn master never
        opened the log: its workers did)."""
        on_file = self.tenure.file.read()
        if self.is_open or (on_file is not None and on_file.holder == self.holder):
            self.tenure.release()

    # -- /ping, from memory --------------------------------------------------------------------

    def ping(self) -> dict[str, Any]:
        """AgentCore health: HealthyBusy while this process has runs or hooks in flight.
        Answered from memory: ``/ping`` never opens (or creates) the log."""
        busy = self.jobs.is_busy()
        updated = max(self.started_at, self.jobs.last_change)
        return {"status": "HealthyBusy" if busy else "Healthy", "time_of_last_update": int(updated)}
