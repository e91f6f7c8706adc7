"""One server process's view of foldline: the engine, opened lazily, and the parts that use it.

Each gunicorn worker builds its own engine on first need (never before fork, never for
``/ping``: design.md §4.2's lazy activation). All workers of one ``foldline serve`` share a lease
holder name, so the lease belongs to the server instance: the first request that writes takes
it, and the others of the same instance find it theirs.

``Runtime``'s constructor is the one composition root of the parts (in ``adapters.services``):
``tenure`` (the lease, and the epoch writes carry), ``jobs`` (dispatch: starting runs), the
named use cases (``invocations``, ``messages``, ``winddown``), ``integration``, ``anchor``,
the checkpoints, and the outbox's deliveries; recovery runs when the tenure is taken, and
the holder's duties after each renewal (``RENEWAL_DUTIES``). The HTTP resources use the runtime
only through their ports (``adapters.http.ports``), which it implements.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from adapters.services import checkpoints, recovery, sandbox, server_stop
from adapters.services.anchoring import Anchoring
from adapters.services.busy import BusyBoard
from adapters.services.dispatch import Dispatcher
from adapters.services.integration import Integrator
from adapters.services.invocations import Invocations
from adapters.services.push import Deliverer, Payload
from adapters.services.task_messages import TaskMessages
from adapters.services.tenure import Tenure
from adapters.services.winddown import Winddown
from adapters.settings import shared_volume
from adapters.settings.config import ServerConfig
from adapters.settings.declarations import load_declarations
from adapters.settings.log_sources import reading
from adapters.settings.operator_token import OperatorToken
from adapters.system import log_anchor
from adapters.system.url_policy import UrlPolicy
from engine import open_notifier
from engine.clock import Clock
from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.domain.rules import Settings
from engine.engine import CommandResult
from engine.errors import EngineError, LogMissing
from engine.log import Log
from engine.merkle import nodes as tree_nodes
from engine.merkle.proofs import b64
from engine.notifier import Notifier
from engine.write.context import LogStats
from projections import open_engine
from projections.reads import ReadModels

log = logging.getLogger("foldline.runtime")


def _keep_serving() -> None:
    """Losing the lease refuses writes, nothing more (tests; the server stops instead)."""


class Runtime:
    """The constructor builds every part, in the order they depend on each other, and hands
    each its collaborators through its own constructor; nothing is set on a part afterwards.
    What the runtime cannot decide comes in through it too: ``push_payload``, the body a push
    delivery sends (A2A's wire, from the HTTP wing: ``adapters.http.a2a.push.payload_for``;
    none: no deliveries), and ``on_lost``, what losing the lease does to the process (the
    server program stops the whole server)."""

    def __init__(
        self,
        config: ServerConfig,
        holder: str,
        clock: Clock | None = None,
        *,
        push_payload: Payload | None = None,
        on_lost: Callable[[], None] = _keep_serving,
    ) -> None:
        self.config = config
        self.holder = holder
        self.clock = clock  # None: the system clock; tests inject one to move time
        # This process's engine, opened on first need (``engine``).
        self._pid = -1
        self._engine: DomainEngine | None = None
        self._notifier: Notifier | None = None
        self._open_lock = threading.Lock()
        self._volume_lock = threading.Lock()
        self.refused: str | None = None  # why the last open was refused (log_missing)
        self.open_streams = 0
        self._streams_lock = threading.Lock()
        self.shutdown = threading.Event()

        # The parts, each given what it uses.
        self.operator_token = OperatorToken(config)
        self.graces = recovery.Graces(config.start_grace_s, config.transition_grace_s)
        # Made here, in the gunicorn master before it forks: every worker counts on the same page.
        self.busy = BusyBoard()
        self.jobs = Dispatcher(config, lambda: self.engine, self.shutdown, self.busy)
        self.stopper = server_stop.ServerStop(config, self.shutdown, self.jobs.winding_down)
        self.integration = Integrator(lambda: self.engine, self.jobs.worktrees)
        self.winddown = Winddown(lambda: self.engine, self.jobs, config.stop_grace_s, self.shutdown)
        self.invocations = Invocations(lambda: self.engine, self.jobs)
        self.messages = TaskMessages(lambda: self.engine, self.jobs)
        self.tenure = Tenure(
            config,
            holder,
            engine=lambda: self.engine,
            recover=self._recover,
            is_recovered=lambda: recovery.is_recovered(self.engine),
            on_renewed=self._renewed,
            stopping=self.shutdown,
            log_missing=self.log_missing,
            close_log=self.close_log,
            on_lost=on_lost,
        )
        # The outbox's deliveries, started by the first tenure of each process.
        self._pushes = (
            Deliverer(
                lambda: self._engine if self.is_open else None,
                holder,
                UrlPolicy(config.push_allow),
                push_payload,
                stopping=self.shutdown,
                busy=self.busy,
            )
            if push_payload is not None
            else None
        )
        # The anchor outside the workspace (adapters.services.anchoring); none for PostgreSQL.
        self.anchor = Anchoring(config, holder, lambda: self.engine, self.tenure)
        self.anchor_path = self.anchor.path
        # The latest signed checkpoint, beside the anchor (adapters.services.checkpoints); a
        # signer only with FOLDLINE_CHECKPOINT_KEY.
        self.checkpoint_path = checkpoints.checkpoint_file(
            log_anchor.anchor_file(config.state_dir, Path(str(config.log_target)))
        )
        self._checkpoints = (
            checkpoints.Checkpointer(
                config.checkpoint_key,
                config.checkpoint_every,
                config.checkpoint_interval_s,
                self.checkpoint_path,
            )
            if config.checkpoint_key is not None
            else None
        )

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
                    self._engine = self._open_checked()
                    self._notifier = open_notifier(self._engine.log)
                    self._pid = os.getpid()
                    self.tenure.forget()
                    self.anchor.forget()
        assert self._engine is not None
        return self._engine

    @property
    def reads(self) -> ReadModels:
        """The read models' typed queries over this process's log (opened on first need)."""
        return ReadModels(self.engine.log)

    @property
    def events(self) -> Log:
        """This process's log, for its committed events (opened on first need)."""
        return self.engine.log

    @property
    def log_stats(self) -> LogStats:
        """This process's write figures (``/metrics``)."""
        return self.engine.log.stats

    def handle(self, command: c.Command) -> CommandResult:
        """Decide and record one command on this process's log (the caller holds the lease);
        an owed reply its commit made is handed on (ADR 0050)."""
        done = self.engine.handle(command)
        self.jobs.replies.hand_on(done)
        return done

    def _open_checked(self) -> DomainEngine:
        """Open the log, refusing one that does not extend its anchor (``log_missing``)."""
        try:
            engine = self._open_judged()
        except LogMissing as ex:
            self.refused = ex.message  # what /metrics and waiting callers say until it opens
            raise
        self.refused = None
        return engine

    def _open_judged(self) -> DomainEngine:
        anchor = self.anchor.read()
        db = self.config.db
        if anchor is not None and not db.exists():
            self.anchor.refuse_unless_replaceable(anchor, f"{db} is gone")
        # First activation makes the operator token (unless FOLDLINE_TOKEN is set) before the
        # log, so no run can exist without one.
        self.operator_token.ensure()
        engine = self._open()
        try:
            if self.jobs.sandbox is not None:
                sandbox.prepare(self.jobs.sandbox, self.config.workspace)
            if anchor is not None:
                reason = log_anchor.missing_reason(anchor, db, engine.log.connection())
                if reason is not None:
                    self.anchor.refuse_unless_replaceable(anchor, reason)
        except LogMissing:
            engine.log.close()
            raise
        return engine

    def _open(self) -> DomainEngine:
        config = self.config
        settings = Settings(
            resource_groups=config.resource_groups,
            lease_stale_s=config.lease_stale_s,
            agents=config.agents.policies,
            max_depth=config.agents.max_depth,
            max_active_agents=config.agents.max_active_agents,
            max_active_writers=config.agents.max_active_writers,
        )
        # The machines a plugin adds or revises (FOLDLINE_MACHINES, entry points) are the
        # server's too, and the log records them before the first event written under them.
        return open_engine(
            config.log_target,
            settings,
            clock=self.clock,
            sync=config.sync,  # type: ignore[arg-type]
            extra_machines=tuple(load_declarations().machines),
            record_declarations=True,
        )

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

    def close_log(self) -> None:
        """Close this process's log and notifier, the server going on: a shared-volume server
        refused the lease keeps no descriptor on the log (ADR 0035); the next need reopens."""
        with self._open_lock:
            if self.is_open:
                if self._notifier is not None:
                    self._notifier.stop()
                self._engine.log.close()  # type: ignore[union-attr]
            self._engine = None
            self._notifier = None

    def judge_volume_again(self) -> None:
        """A shared-volume mode the mount left off at boot (ADR 0042), judged again until this
        process opens the log: AgentCore mounts its file system at the first invocation, after
        the boot. A network file system under the log now turns this process's mode on, with
        one line saying so; once the log is open here the mode stays as it is."""
        volume = self.config.volume
        if volume is None or not volume.is_pending or self.config.shared_volume or self.is_open:
            return
        with self._volume_lock:
            if self.config.shared_volume or self.is_open:
                return
            now = shared_volume.judge_again(self.config.db)
            if now is None:
                return
            # Only the tenure and the gate read the mode, both through these two configs.
            self.config = replace(self.config, shared_volume=True, volume=now)
            self.tenure.follow_config(self.config)
        print(now.shown(), file=sys.stderr, flush=True)

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
        # An integration cut off is finished or undone before any run starts in the tree.
        self.integration.recover()
        recovery.recover(self.engine, self.jobs.resume, self.graces, self.jobs.replies.hand_on)
        self.winddown.sweep_worktrees(unknown_too=True)

    def _renewed(self) -> None:
        """After each renewal of the lease: the holder's duties, in order (``RENEWAL_DUTIES``).
        One that raises ends the pass (the tenure logs it); the next renewal runs them all."""
        for duty in RENEWAL_DUTIES:
            duty(self)

    def extend_tree(self) -> None:
        """At a renewal, key or no key: store the Merkle tree nodes the new events completed
        (``engine.merkle.nodes``), so that heads and proofs never rehash history. Off the append
        path, which it leaves as fast as it was; idempotent, so it needs no fencing."""
        try:
            tree_nodes.extend_tree(self.engine.log)
        except EngineError as ex:  # the next renewal tries again; readers hash what is missing
            log.error("the tree nodes were not extended: %s", ex)
        except Exception:  # never stops the renewals that keep the lease
            log.exception("the tree nodes were not extended")

    def sign_checkpoint(self) -> None:
        """At a renewal: sign, record and keep a checkpoint if one is due (and consistent)."""
        if self._checkpoints is None:
            return
        try:
            with reading(str(self.config.log_target)) as reader:
                signed = self._checkpoints.sign(reader, self.engine.clock.now())
            if signed is None:
                return
            head, note = signed
            root = b64(head.root)
            command = c.RecordCheckpoint(
                holder=self.holder,
                epoch=self.tenure.epoch or 0,
                origin=head.origin,
                size=head.size,
                root=root,
                note=note,
                command_id=f"checkpoint:{head.size}:{root}",
            )
            self.engine.handle(command)  # recorded first: the kept note is always on record
            checkpoints.write_note(self.checkpoint_path, note)
        except (EngineError, OSError) as ex:  # the next renewal tries again
            log.error("no checkpoint signed: %s", ex)
        except Exception:  # a checkpoint never stops the renewals that keep the lease
            log.exception("no checkpoint signed")

    def log_missing(self) -> str | None:
        """Why the log cannot be written (``log_missing``), None while it can: an open refused
        by the anchor, or a file that is no longer the one this process opened."""
        if self.refused is not None:
            return self.refused
        if not self.is_open:
            return None
        return self.engine.log.storage.lost()

    def check_log(self) -> None:
        """Raises LogMissing: the log is gone (see ``log_missing``)."""
        missing = self.log_missing()
        if missing is not None:
            raise LogMissing(missing)

    def ending(self) -> bool:
        """Whether long waits and streams should end now: the server is stopping, or its log
        is gone (a stream would otherwise wait for commits that can never come)."""
        return self.shutdown.is_set() or self.log_missing() is not None

    def lease_holder(self) -> tuple[str, int] | None:
        """The instance holding the lease and its epoch, per the log (None if free)."""
        return self.tenure.current_holder()

    def ensure_lease(self) -> None:
        """Hold the workspace lease before writing (see ``Tenure.ensure``). A tenure new to
        this process anchors the log first, and records a lost anchor (``--new-log``); the
        outbox's deliveries start with it."""
        self.tenure.ensure()
        self._deliver_pushes()
        self.anchor.hold()

    def _deliver_pushes(self) -> None:
        if self._pushes is not None:
            self._pushes.start()  # once per process

    def release_lease(self) -> None:
        """Graceful stop: give the lease back if this instance holds it. The lease file is
        read first, so a server that never wrote opens nothing (the gunicorn master never
        opened the log: its workers did)."""
        on_file = self.tenure.file.read()
        if not (self.is_open or (on_file is not None and on_file.holder == self.holder)):
            return
        try:
            if self.log_missing() is None:
                self.tenure.release()
                self.anchor.write()
        except LogMissing as ex:  # gone since: nothing to release into
            log.error("lease not released: %s", ex)

    # -- /ping, from memory --------------------------------------------------------------------

    def ping(self) -> dict[str, Any]:
        """AgentCore health: HealthyBusy while any run or notify hook of this server is in
        flight, or a push notification is owed, whichever worker answers, and when that last
        changed. Answered from the shared busy board: ``/ping`` never opens (or creates) the
        log."""
        busy, changed_at = self.busy.state()
        return {
            "status": "HealthyBusy" if busy else "Healthy",
            "time_of_last_update": int(changed_at),
        }


# -- what the lease holder does at every renewal -------------------------------------------------


def record_timeouts(runtime: Runtime) -> None:
    """design.md §4.3's clocks: a start or a transition of a controlled session past its grace
    is recorded timed out (``recovery.record_timeouts``)."""
    recovery.record_timeouts(runtime.engine, runtime.graces)


def finish_cut_off_integration(runtime: Runtime) -> None:
    """An integrate whose worker died alone (the lease lives on) is finished or undone; not
    while one runs (``Integrator.recover``)."""
    runtime.integration.recover(wait=False)


def write_anchor(runtime: Runtime) -> None:
    """The log's anchor at its head, now that this renewal's writes are in (``Anchoring``)."""
    runtime.anchor.write()


# The duties of the lease holder after each renewal, in this order:
# - the clocks first, and a cut-off integration next: both record events, which the later
#   duties then cover;
# - the anchor at the log's head, once this renewal's writes are in;
# - the Merkle tree's nodes for the events they complete, before the checkpoint, whose head
#   and proof read the nodes they store;
# - the checkpoint last: it records what the log holds before it.
# extend_tree and sign_checkpoint never raise (they log, and the next renewal tries again);
# an error of an earlier duty ends the pass, as a failed renewal does.
RENEWAL_DUTIES: tuple[Callable[[Runtime], None], ...] = (
    record_timeouts,
    finish_cut_off_integration,
    write_anchor,
    Runtime.extend_tree,
    Runtime.sign_checkpoint,
)
