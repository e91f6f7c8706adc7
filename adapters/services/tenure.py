"""The workspace lease, held by one server instance (design.md §4.2): acquire on request, judge a
stale holder, confirm a takeover, renew, fence ourselves off, lose, release.

Two gates, both taken: the lease file beside the log (the one gate hosts on a shared filesystem
can trust) and the lease stream in the log (the record, and the epoch fence every append
carries). This module is the only one that sets the epoch this process writes with.

The file is judged by epoch, never by its last writer: a record of an older epoch (a woken
zombie finishing a renewal it had started) is overwritten with ours, and only a newer epoch,
in the file or in the log, makes a holder stop.

With ``shared_volume`` (ADR 0035) the file is judged before the log is opened at all: a file
held by another instance, and not yet stale, is a lease-busy refusal with the log untouched,
and an open that still ends in a refusal closes the log again (``close_log``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from adapters.settings.config import ServerConfig
from adapters.system import tracing
from adapters.system.leasefile import LeaseFile, LeaseRecord
from adapters.system.log_lease import LogLease
from engine.clock import parse_time
from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.domain.errors import LeaseBusy
from engine.domain.lease import LeaseState
from engine.domain.rows import LeaseRow
from engine.errors import EngineError
from projections import queries

log = logging.getLogger("foldline.tenure")
LEASE = "workspace"


class Tenure:
    """This server instance's hold on the workspace lease, per process.

    ``recover`` runs once, in the process that takes the lease, before ``ensure`` returns;
    ``is_recovered`` is what the other workers of the instance wait for instead. ``on_renewed``
    runs after every renewal (the holder's duties, in order: ``runtime.RENEWAL_DUTIES``).
    ``on_lost`` is what losing the lease does beyond refusing writes (the server program stops
    the whole server; by default nothing more).
    """

    def __init__(
        self,
        config: ServerConfig,
        holder: str,
        engine: Callable[[], DomainEngine],
        recover: Callable[[], None],
        is_recovered: Callable[[], bool],
        on_renewed: Callable[[], None],
        stopping: threading.Event,
        log_missing: Callable[[], str | None] = lambda: None,
        monotonic: Callable[[], float] = time.monotonic,
        close_log: Callable[[], None] = lambda: None,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.holder = holder
        self._engine = engine
        self._recover = recover
        self._is_recovered = is_recovered
        self._on_renewed = on_renewed
        self._stopping = stopping
        self._log_missing = log_missing
        self._monotonic = monotonic
        self._close_log = close_log
        # Shared volume: the other instance's file record judged stale before the log opened.
        self._stale_file: LeaseRecord | None = None
        # The gate beside the log: the lease file, or on PostgreSQL the log itself.
        self.file: LeaseFile | LogLease = (
            LeaseFile(config.db) if config.db_url is None else LogLease(engine, LEASE)
        )
        self.epoch: int | None = None
        self._lock = threading.Lock()
        self._seen: tuple[Any, float] | None = None
        self.lost = threading.Event()
        self._on_lost = on_lost
        self._renewed_at = 0.0  # monotonic: the last whole renewal (or the acquisition)

    def follow_config(self, config: ServerConfig) -> None:
        """The server's config as it changed after the boot: only its shared-volume mode,
        decided by the mount the log lies on (ADR 0042), changes, and only to on."""
        self.config = config

    def forget(self) -> None:
        """A new process (after fork) holds nothing until it asks."""
        self.epoch = None
        self._seen = None

    # -- reading the lease -------------------------------------------------------------------

    def _row(self) -> LeaseRow | None:
        return queries.lease(self._engine().log.connection(), LEASE)

    def current_holder(self) -> tuple[str, int] | None:
        held = queries.lease_held(self._engine().log.connection(), LEASE)
        return (held.holder, held.epoch) if held is not None else None

    def is_held_here(self) -> bool:
        current = self.current_holder()
        return current is not None and current[0] == self.holder

    def _record(self, epoch: int) -> LeaseRecord:
        return LeaseRecord(self.holder, epoch, os.uname().nodename, os.getppid(), time.time())

    # -- acquiring ---------------------------------------------------------------------------

    def ensure(self) -> None:
        """Hold the workspace lease before writing; concurrent requests share one attempt.

        The worker that takes the lease (fresh, or over a stale holder) runs recovery before
        anything new is dispatched; the other workers of this instance wait for it.

        Raises:
            LeaseBusy: another live server instance holds it, or this one lost it.
        """
        if self.lost.is_set():
            raise LeaseBusy("this server lost the workspace lease")
        if self.epoch is not None:
            return
        if self.config.shared_volume:
            self._judge_file()  # before anything opens the log
        engine = self._engine()
        with self._lock:
            if self.epoch is not None:
                return
            began = time.time_ns()
            try:
                epoch, taken_now = self._take()
            except LeaseBusy:
                if self.config.shared_volume:  # a non-holder keeps nothing of the log open
                    self._close_log()
                raise
            engine = self._engine()  # the one open now (a refusal in another thread closes)
            engine.log.fence(epoch)
            if taken_now:
                span = self._taken(engine, epoch, began)
                try:
                    with tracing.activated(span):
                        self._recover()
                except BaseException:
                    log.exception("recovery failed; giving the lease back")
                    span.fail("recovery failed")
                    span.end()
                    self.release()
                    if self.config.shared_volume:
                        self._close_log()
                    raise LeaseBusy("recovery failed") from None
                span.end()
            else:
                deadline = self._monotonic() + 60
                while not self._is_recovered() and self._monotonic() < deadline:
                    time.sleep(0.05)
            self.epoch = epoch
            self._renewed_at = self._monotonic()
            threading.Thread(target=self._renew, name="foldline-lease", daemon=True).start()
            threading.Thread(target=self._watch, name="foldline-lease-watch", daemon=True).start()

    def _taken(self, engine: DomainEngine, epoch: int, began: int) -> tracing.Span:
        """Say at info that this process took the lease, and start its span (ADR 0059): a
        ``lease.takeover`` or ``lease.acquire``, with the position of the event recorded; the
        recovery that follows is its child."""
        row = self._row()
        recorded = (
            engine.log.read_stream(f"lease:{LEASE}", after_version=row.version - 1)
            if row is not None
            else []
        )
        kind = recorded[-1].event_type if recorded else "lease.acquired"
        verb = "taken over" if kind == "lease.taken_over" else "acquired"
        log.info("workspace lease %s at epoch %d by %s", verb, epoch, self.holder)
        return tracing.start(
            "lease.takeover" if verb == "taken over" else "lease.acquire",
            start_ns=began,
            root=True,
            attributes={
                "foldline.holder": self.holder,
                "foldline.epoch": epoch,
                "foldline.positions": [recorded[-1].position] if recorded else None,
            },
        )

    def _take(self) -> tuple[int, bool]:
        """The epoch this instance holds, and whether this call just took it.

        A takeover is confirmed before anything is appended: our record goes into the file,
        and only if it is still there (and the log's lease unchanged) after the confirm pause
        is ``lease.taken_over`` recorded (design.md §4.2).
        """
        engine, host = self._engine(), os.uname().nodename
        row = self._row()
        on_file = self.file.read()
        theirs_file = on_file is not None and on_file.holder != self.holder
        theirs_log = row is not None and row.state == LeaseState.HELD and row.holder != self.holder
        if theirs_file or theirs_log:
            if not (theirs_file and on_file == self._stale_file):  # judged before the open
                self._judge_stale((on_file, row))
            # The epoch the takeover will get, for the file; the log's rule assigns it.
            claim = self._record((row.epoch if row else 0) + 1)
            if not self.file.confirm_takeover(claim, self.config.lease_confirm_s):
                raise LeaseBusy("lost the race for the lease file")
            if self._row() != row:
                raise LeaseBusy("the lease moved while the takeover was being confirmed")
        elif on_file is None and not self.file.claim(self._record(0)):
            # Created since our read: by another worker of this instance (which then goes on
            # as we do, the log deciding who records the acquisition), or by another server.
            claimed = self.file.read()
            if claimed is None or claimed.holder != self.holder:
                raise LeaseBusy("another server claimed the lease file first")
        if row is None or row.state == LeaseState.RELEASED:
            with contextlib.suppress(LeaseBusy):  # another worker of this instance may be first
                engine.handle(
                    c.AcquireLease(name=LEASE, holder=self.holder, host=host, pid=os.getppid())
                )
        elif theirs_log:
            # The domain rule checks the age on the recorded clock as well.
            engine.handle(
                c.TakeOverLease(name=LEASE, holder=self.holder, host=host, pid=os.getppid())
            )
        current = self.current_holder()
        if current is None or current[0] != self.holder:
            raise LeaseBusy(
                "lease held by another server instance", holder=current[0] if current else None
            )
        self.file.replace(self._record(current[1]))
        took = row is None or row.state == LeaseState.RELEASED or theirs_log
        return current[1], took

    def _judge_file(self) -> None:
        """Shared volume: the lease file alone decides whether this process may open the log.
        Another instance's record passes only once stale (its holder rewrites it at every
        renewal, so an unchanged record over the whole window is an unrenewed lease).

        Raises:
            LeaseBusy: the file names another instance, not stale (yet).
        """
        on_file = self.file.read()
        if on_file is None or on_file.holder == self.holder:
            return
        self._judge_stale(on_file)
        self._stale_file = on_file

    def _judge_stale(self, observed: Any) -> None:
        """Stale means: this process has seen the very same lease (file record and log row),
        unrenewed, for the whole stale window of its own monotonic clock. Clock skew between
        hosts cannot shorten it.

        Raises:
            LeaseBusy: not stale (yet).
        """
        seen = self._seen
        if seen is None or seen[0] != observed:
            self._seen = (observed, self._monotonic())
            raise LeaseBusy("the workspace lease is held by another server")
        if self._monotonic() - seen[1] <= self.config.lease_stale_s:
            raise LeaseBusy("the workspace lease is held by another server")

    # -- holding -----------------------------------------------------------------------------

    def _renew(self) -> None:
        """Renew while held; on a newer epoch (or renewals failing for too long) stop at once.

        A renewal writes both gates, the log's lease row and the lease file; it fails when
        either cannot be written (an engine error, or an ``OSError`` of the file: a read-only
        mount, an immutable file). A failed renewal is tried again at every tick, due or not,
        and only a whole one ends the failing: a tick with nothing due never hides one. After
        stale minus renew seconds without a whole renewal the holder fences itself off, before
        a contender can judge it stale (ADRs 0013, 0016); ``_watch`` does it too, should a renewal
        hang instead of failing.
        """
        failing = False
        while not self._stopping.wait(self.config.lease_renew_s / 2):
            missing = self._log_missing()
            if missing is not None:  # nothing more is written: the lease goes with its log
                log.error("lease renewals stop: %s", missing)
                return
            try:
                renewed = self._renew_once(due=failing)
            except (EngineError, OSError) as ex:
                log.error("lease renewal failed: %s", ex)
                failing = True
            else:
                if renewed is False:
                    return
                failing = False
                self._renewed_at = self._monotonic()
                if renewed:
                    self._after_renewal()
            if self._is_overdue():
                self.lose("renewals have failed for too long: fencing ourselves off")
                return

    def _is_overdue(self) -> bool:
        """No whole renewal for stale minus renew seconds: a contender may judge this holder
        stale one renew interval from now."""
        overdue = self.config.lease_stale_s - self.config.lease_renew_s
        return self._monotonic() - self._renewed_at > overdue

    def _watch(self) -> None:
        """Fence this holder off once renewals are overdue, even while the renewing thread
        hangs inside a call (a database cut off with connections waiting to be let in, a
        network file system that does not answer): the fence cannot wait for it to return."""
        while not self._stopping.wait(self.config.lease_renew_s / 2):
            if self.lost.is_set():
                return
            if self._is_overdue():
                self.lose("no renewal for too long (one may hang): fencing ourselves off")
                return

    def _renew_once(self, due: bool) -> bool | None:
        """One tick: still the holder, and both gates renewed when the row is old enough (or
        ``due``, after a failed one). False: lost; True: renewed; None: nothing was due.

        Raises:
            EngineError: the log refused the renewal.
            OSError: the lease file could not be read or written.
        """
        if not self.check():
            return False
        row = self._row()
        if row is None:  # check() just saw it held by us; a lease row is never deleted
            raise EngineError("the lease row vanished")
        age = (self._engine().clock.now() - parse_time(row.renewed_at)).total_seconds()
        if not due and age < self.config.lease_renew_s * 0.8:
            return None
        self._engine().handle(c.RenewLease(name=LEASE, holder=self.holder, epoch=self.epoch or 0))
        # Judged again just before the rewrite: a newer claim written meanwhile is never
        # blindly replaced by ours (that was the zombie's fault, too).
        if not self.check():
            return False
        self.file.replace(self._record(self.epoch or 0))
        return True

    def _after_renewal(self) -> None:
        """The holder's duties; one that fails is logged and the renewals go on."""
        try:
            self._on_renewed()
        except (EngineError, OSError) as ex:
            log.error("a duty after the lease renewal failed: %s", ex)

    def check(self) -> bool:
        """Still the holder? A newer epoch in the log or in the file means lost (and returns
        False); a file record of an older epoch, or none, is put right with ours."""
        mine = self.epoch or 0
        row = self._row()
        ours = (LeaseState.HELD, self.holder, mine)
        if row is None or (row.state, row.holder, row.epoch) != ours:
            now = f"{row.holder} at epoch {row.epoch} ({row.state})" if row else "gone"
            self.lose(f"the lease is now {now}")
            return False
        on_file = self.file.read()
        if on_file is not None and on_file.epoch > mine:
            self.lose(f"the lease file names {on_file.holder} at the newer epoch {on_file.epoch}")
            return False
        if on_file is None or on_file.holder != self.holder or on_file.epoch != mine:
            log.warning(
                "the lease file named %s (epoch %s), older than ours (%s): restoring our record",
                on_file.holder if on_file else "nobody",
                on_file.epoch if on_file else "-",
                mine,
            )
            self.file.replace(self._record(mine))
        return True

    def lose(self, why: str) -> None:
        """Stop writing at once; no graceful flush into the next holder's log."""
        if self.lost.is_set():  # the renewing and the watching thread may both see it
            return
        log.critical("workspace lease lost: %s", why)
        self.lost.set()
        self._stopping.set()
        self._on_lost()

    def release(self) -> None:
        """Graceful stop: give the lease back if this instance holds it."""
        current = self.current_holder()
        if current is not None and current[0] == self.holder:
            engine = self._engine()
            engine.log.fence(current[1])
            try:
                engine.handle(c.ReleaseLease(name=LEASE, holder=self.holder, epoch=current[1]))
            except EngineError as ex:
                log.warning("lease not released: %s", ex)
                return
            log.info("workspace lease released at epoch %d by %s", current[1], self.holder)
        self.file.remove(self.holder)
