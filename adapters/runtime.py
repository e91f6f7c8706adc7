"""One server process's view of foldline: the engine, the lease, dispatch and waiting.

Each gunicorn worker builds its own ``Runtime`` lazily (never before fork). All workers of one
``foldline serve`` share a lease holder name, so the lease belongs to the server instance: the
first request that writes takes it, and the others of the same instance find it theirs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from dataclasses import replace as replace_record
from datetime import UTC
from pathlib import Path
from typing import Any

from adapters import notify, recovery, runner
from adapters.config import ServerConfig
from adapters.leasefile import LeaseFile, LeaseRecord
from adapters.processes import spawn_gated
from engine import open_notifier
from engine.clock import parse_time
from engine.domain import commands as c
from engine.domain.errors import LeaseBusy
from engine.domain.job import TERMINAL as JOB_TERMINAL
from engine.domain.rules import Settings
from engine.engine import Engine
from engine.errors import EngineError
from engine.log import Transaction
from engine.notifier import Notifier
from projections import open_engine
from projections.view import SqlDomainView

log = logging.getLogger("foldline.runtime")
LEASE = "workspace"


def new_id(prefix: str) -> str:
    """``<prefix>_<time><hex>``: sortable by creation, unique without coordination."""
    return f"{prefix}_{time.time_ns() // 1_000_000:x}{secrets.token_hex(6)}"


@dataclass(frozen=True)
class Accepted:
    job_id: str
    session_id: str
    caller_id: str | None
    position: int
    duplicate: bool = False


class DispatchFailed(Exception):
    """The job could not reach its runner; no job row was left (HTTP 500, retry may run)."""


class _Duplicate(Exception):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id


class Runtime:
    def __init__(self, config: ServerConfig, holder: str) -> None:
        self.config = config
        self.holder = holder
        self.started_at = time.time()
        self._pid = -1
        self._engine: Engine | None = None
        self._notifier: Notifier | None = None
        self._open_lock = threading.Lock()
        self._lease_lock = threading.Lock()
        self._lease_epoch: int | None = None
        self._lease_seen: tuple[Any, float] | None = None
        self.lease_file = LeaseFile(config.db)
        self._runs: dict[str, threading.Thread] = {}
        self.lost = threading.Event()
        # What losing the lease does beyond refusing writes; the server makes it exit.
        self.on_lost: Callable[[], None] = lambda: None
        self.open_streams = 0
        self._streams_lock = threading.Lock()
        self.shutdown = threading.Event()

    # -- the engine, per process -------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        if self._engine is None or self._pid != os.getpid():
            with self._open_lock:
                if self._engine is None or self._pid != os.getpid():
                    self._engine = open_engine(
                        self.config.db,
                        Settings(
                            resource_groups=self.config.resource_groups,
                            lease_stale_s=self.config.lease_stale_s,
                        ),
                        sync=self.config.sync,  # type: ignore[arg-type]
                    )
                    self._notifier = open_notifier(self._engine.log)
                    self._pid = os.getpid()
                    self._lease_epoch = None
        return self._engine

    def close(self) -> None:
        """Stop: cut off the runs of this process (they stay recorded as running, for recovery),
        then close the notifier and the log."""
        self.shutdown.set()
        for thread in list(self._runs.values()):
            thread.join(timeout=10)
        if self._notifier is not None and self._pid == os.getpid():
            self._notifier.stop()
        if self._engine is not None and self._pid == os.getpid():
            self._engine.log.close()
        self._engine = None

    def query(self, sql: str, *params: Any) -> list[Any]:
        rows: list[Any] = self.engine.log.connection().execute(sql, params).fetchall()
        return rows

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

    # -- the lease (acquired on request, SPEC §4.2) ---------------------------------------------

    def lease_holder(self) -> tuple[str, int] | None:
        rows = self.query(
            "SELECT holder, epoch FROM leases WHERE name = ? AND state = 'held'", LEASE
        )
        return (rows[0][0], rows[0][1]) if rows else None

    def ensure_lease(self) -> None:
        """Hold the workspace lease before writing; concurrent requests share one attempt.

        The worker that takes the lease (fresh, or over a stale holder) runs recovery before
        anything new is dispatched; the other workers of this instance wait for it.

        Raises:
            LeaseBusy: another live server instance holds it, or this one lost it.
        """
        if self.lost.is_set():
            raise LeaseBusy("this server lost the workspace lease")
        if self._lease_epoch is not None:
            return
        engine = self.engine
        with self._lease_lock:
            if self._lease_epoch is not None:
                return
            epoch, taken_now = self._take_lease()
            engine.log.epoch = epoch
            if taken_now:
                try:
                    recovery.recover(self)
                except BaseException:
                    log.exception("recovery failed; giving the lease back")
                    self.release_lease()
                    raise LeaseBusy("recovery failed") from None
            else:
                deadline = time.monotonic() + 60
                while not recovery.is_recovered(self) and time.monotonic() < deadline:
                    time.sleep(0.05)
            self._lease_epoch = epoch
            threading.Thread(target=self._renew, name="foldline-lease", daemon=True).start()

    def _take_lease(self) -> tuple[int, bool]:
        """The epoch this instance holds, and whether this call just took it.

        Two gates, both taken: the lease file beside the log (the one hosts on a shared
        filesystem can trust) and the lease stream in the log (the record and the fence).
        """
        engine, host = self.engine, os.uname().nodename
        record = LeaseRecord(self.holder, 0, host, os.getppid(), time.time())
        rows = self.query("SELECT holder, epoch, state, version FROM leases WHERE name = ?", LEASE)
        on_file = self.lease_file.read()
        theirs_file = on_file is not None and on_file.holder != self.holder
        theirs_log = bool(rows) and rows[0][2] == "held" and rows[0][0] != self.holder
        if theirs_file or theirs_log:
            self._check_stale((on_file, tuple(rows[0]) if rows else None))
        if on_file is None and not self.lease_file.claim(record):
            raise LeaseBusy("another server claimed the lease file first")
        if theirs_file:
            self.lease_file.replace(record)
        if not rows or rows[0][2] == "released":
            with contextlib.suppress(LeaseBusy):  # another worker or server may be first
                engine.handle(
                    c.AcquireLease(name=LEASE, holder=self.holder, host=host, pid=os.getppid())
                )
        elif theirs_log:
            # The domain rule checks the age on the recorded clock as well.
            engine.handle(
                c.TakeOverLease(name=LEASE, holder=self.holder, host=host, pid=os.getppid())
            )
        if theirs_file or theirs_log:  # confirmed by a re-read after a pause, before opening
            time.sleep(self.config.lease_confirm_s)
            confirmed = self.lease_file.read()
            if confirmed is None or confirmed.holder != self.holder:
                raise LeaseBusy("lost the race for the lease file")
        current = self.lease_holder()
        if current is None or current[0] != self.holder:
            raise LeaseBusy(
                "lease held by another server instance", holder=current[0] if current else None
            )
        self.lease_file.replace(replace_record(record, epoch=current[1]))
        took = not rows or rows[0][2] == "released" or theirs_log
        return current[1], took

    def _check_stale(self, observed: Any) -> None:
        """Stale means: this process has seen the very same lease (file record and log row),
        unrenewed, for the whole stale window of its own monotonic clock. Clock skew between
        hosts cannot shorten it.

        Raises:
            LeaseBusy: not stale (yet).
        """
        seen = self._lease_seen
        if seen is None or seen[0] != observed:
            self._lease_seen = (observed, time.monotonic())
            raise LeaseBusy("the workspace lease is held by another server")
        if time.monotonic() - seen[1] <= self.config.lease_stale_s:
            raise LeaseBusy("the workspace lease is held by another server")

    def _renew(self) -> None:
        """Renew while held; on a newer epoch (or renewals failing for too long) stop at once."""
        last_ok = time.monotonic()
        margin = self.config.lease_renew_s
        while not self.shutdown.wait(self.config.lease_renew_s / 2):
            try:
                rows = self.query(
                    "SELECT holder, epoch, state, renewed_at FROM leases WHERE name = ?", LEASE
                )
                holder, epoch, state, renewed = rows[0]
                on_file = self.lease_file.read()
                if on_file is None or on_file.holder != self.holder:
                    self._lose("the lease file names another holder")
                    return
                if (holder, epoch, state) != (self.holder, self._lease_epoch, "held"):
                    self._lose(f"the lease is now {holder} at epoch {epoch} ({state})")
                    return
                age = (self.engine.clock.now() - parse_time(renewed)).total_seconds()
                if age >= self.config.lease_renew_s * 0.8:
                    self.engine.handle(c.RenewLease(name=LEASE, holder=self.holder, epoch=epoch))
                    self.lease_file.replace(
                        LeaseRecord(
                            self.holder, epoch, os.uname().nodename, os.getppid(), time.time()
                        )
                    )
                    recovery.record_timeouts(self)  # the holder keeps SPEC §4.3's clocks
                last_ok = time.monotonic()
            except EngineError as ex:
                log.error("lease renewal failed: %s", ex)
            if time.monotonic() - last_ok > self.config.lease_stale_s - margin:
                self._lose("renewals have failed for too long: fencing ourselves off")
                return

    def _lose(self, why: str) -> None:
        """Stop writing at once; no graceful flush into the next holder's log."""
        log.critical("workspace lease lost: %s", why)
        self.lost.set()
        self.shutdown.set()
        self.on_lost()

    def resume(self, job_id: str) -> None:
        """Start a cut-off job again: a new run, ``FOLDLINE_RESUMED=1``, the same prompt."""
        accepted = self.engine.log.read_stream(f"job:{job_id}")[0].event
        prompt_file = accepted.prompt_file  # type: ignore[attr-defined]
        stdin = (
            (self.config.workspace / prompt_file).read_bytes()
            if prompt_file
            else (accepted.prompt.encode())
        )  # type: ignore[attr-defined]
        self.launch(
            accepted.session,
            stdin,
            lambda tx, _: None,  # type: ignore[attr-defined]
            job_id=job_id,
        )

    def holds_lease(self) -> bool:
        current = self.lease_holder()
        return current is not None and current[0] == self.holder

    def release_lease(self) -> None:
        """Graceful stop: give the lease back if this instance holds it."""
        current = self.lease_holder()
        if current is not None and current[0] == self.holder:
            self.engine.log.epoch = current[1]
            try:
                self.engine.handle(c.ReleaseLease(name=LEASE, holder=self.holder, epoch=current[1]))
            except EngineError as ex:
                log.warning("lease not released: %s", ex)
                return
        self.lease_file.remove(self.holder)

    # -- invocations ----------------------------------------------------------------------------

    def find_job(self, key: str) -> str | None:
        """``get`` resolution: invocation (job) id first, then the caller's ``id``."""
        rows = self.query("SELECT job_id FROM jobs WHERE job_id = ?", key)
        if not rows:
            rows = self.query("SELECT job_id FROM jobs WHERE command_id = ?", f"inv:{key}")
        return rows[0][0] if rows else None

    def dispatch(
        self,
        prompt: str,
        prompt_file: str,
        session_id: str | None,
        agent: str,
        caller_id: str | None,
    ) -> Accepted:
        """Record a new job and start its run, or answer the job a known ``caller_id`` made.

        Raises:
            DispatchFailed: the run could not be started (nothing recorded).
            EngineError: the rules refused it (pointer conflict, admission, ...).
        """
        engine = self.engine
        session_id = session_id or new_id("inv")
        command_id = f"inv:{caller_id}" if caller_id is not None else None
        try:
            # Read before anything is recorded: a file gone now is a failed dispatch, not a
            # recorded job whose run can never start.
            stdin = (
                (self.config.workspace / prompt_file).read_bytes()
                if prompt_file
                else (prompt.encode())
            )
        except OSError as ex:
            raise DispatchFailed(f"prompt file could not be read: {ex}") from ex

        def record(tx: Transaction, job_id: str) -> None:
            if command_id is not None and tx.known_command(command_id) is not None:
                raise _Duplicate(self._job_of_command(tx, command_id))
            if SqlDomainView(tx.cursor).session(session_id) is None:
                engine.handle_in(
                    tx,
                    c.CreateSession(
                        session_id=session_id,
                        agent=agent,
                        origin="invocations",
                        start_run_id=new_id("run"),
                    ),
                )
            engine.handle_in(
                tx,
                c.AcceptJob(
                    job_id=job_id,
                    session_id=session_id,
                    prompt=prompt,
                    prompt_file=prompt_file,
                    agent=agent,
                    command_id=command_id,
                ),
            )

        try:
            job_id, position = self.launch(session_id, stdin, record)
        except _Duplicate as duplicate:
            return Accepted(duplicate.job_id, session_id, caller_id, 0, duplicate=True)
        return Accepted(job_id, session_id, caller_id, position)

    @staticmethod
    def _job_of_command(tx: Transaction, command_id: str) -> str:
        rows = tx.cursor.execute(
            "SELECT job_id FROM jobs WHERE command_id = ?", (command_id,)
        ).fetchall()
        return str(rows[0][0])

    def launch(
        self,
        session_id: str,
        stdin: bytes,
        record: Callable[[Transaction, str], None],
        job_id: str | None = None,
    ) -> tuple[str, int]:
        """Spawn a gated run, let ``record(tx, job_id)`` accept the job in one transaction,
        start it there, then open the gate. Returns the job id and the commit's position.
        With ``job_id`` (an accepted, cut-off job) the run is a resumption.

        Raises:
            DispatchFailed: the run could not be started (nothing recorded).
            whatever ``record`` raises (nothing recorded, the process is abandoned).
        """
        engine = self.engine
        resumed = job_id is not None
        job_id, run_id = job_id or new_id("job"), new_id("run")
        env = {
            "FOLDLINE_JOB_ID": job_id,
            "FOLDLINE_SESSION_ID": session_id,
            "FOLDLINE_RUN_ID": run_id,
            "FOLDLINE_RESUMED": "1" if resumed else "0",
        }
        try:
            process = spawn_gated(self.config.runner, self.config.workspace, env)
        except OSError as ex:
            raise DispatchFailed(f"runner could not start: {ex}") from ex

        def work(tx: Transaction) -> int:
            record(tx, job_id)
            engine.handle_in(
                tx,
                c.StartJob(
                    job_id=job_id,
                    run_id=run_id,
                    pid=process.pid,
                    start_token=process.token,
                    epoch=engine.log.epoch,
                    resumed=resumed,
                ),
            )
            return tx.position

        try:
            position = engine.log.write(work)
        except BaseException:
            process.abandon()
            raise
        run = runner.Run(job_id, session_id, run_id, stdin, process)
        thread = threading.Thread(target=self._run, args=(run,), name=f"run-{job_id}", daemon=True)
        self._runs[job_id] = thread
        thread.start()
        return job_id, position

    def _run(self, run: runner.Run) -> None:
        try:
            runner.execute(
                self.engine,
                run,
                self.config.workspace,
                timeout_s=self.config.job_timeout_s,
                flush_s=self.config.output_flush_s,
                on_finished=self._notify,
                stopping=self.shutdown,
            )
        except Exception:  # a bug here must not kill the worker; the job stays running
            log.exception("run of %s failed", run.job_id)
        finally:
            self._runs.pop(run.job_id, None)

    def _notify(self, job_id: str, status: str, result: str) -> None:
        if not self.config.notify:
            return
        session_id = self.query("SELECT session_id FROM jobs WHERE job_id = ?", job_id)[0][0]
        notify.run_hook(
            self.engine,
            self.config.notify,
            self.config.workspace,
            self.config.notify_timeout_s,
            job_id,
            session_id,
            status,
            result,
        )

    # -- reading jobs -----------------------------------------------------------------------------

    def job_body(self, job_id: str) -> dict[str, Any]:
        """The AgentCore job body (SPEC §5.1): ``status`` is ``running`` for any live state."""
        rows = self.query(
            "SELECT job_id, session_id, command_id, state, result, files, started_at,"
            " finished_at, superseded_by FROM jobs WHERE job_id = ?",
            job_id,
        )
        job_id, session_id, command_id, state, result, files, started, finished, by = rows[0]
        body: dict[str, Any] = {
            "status": state if state in JOB_TERMINAL else "running",
            "invocation": job_id,
            "session": session_id,
            "id": command_id[len("inv:") :]
            if command_id and command_id.startswith("inv:")
            else None,
            "result": result,
            "files": _json_list(files),
            "startedAt": started,
            "finishedAt": finished,
            "state": state,
        }
        if by is not None:
            body["supersededBy"] = by
        return body

    def wait_until_done(self, job_id: str, timeout_s: float) -> dict[str, Any]:
        """The job body once the job left running (or at the cap, still ``running``)."""
        deadline = time.monotonic() + timeout_s
        log_ = self.engine.log
        while True:
            head = log_.head()
            body = self.job_body(job_id)
            remaining = deadline - time.monotonic()
            if body["status"] != "running" or remaining <= 0 or self.shutdown.is_set():
                return body
            log_.wait_for(head, min(remaining, 1.0))

    def ping(self) -> dict[str, Any]:
        busy = False
        if self.holds_lease():
            busy = bool(
                self.query(
                    "SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('running', 'cancelling'))"
                    " OR EXISTS (SELECT 1 FROM jobs WHERE notify_pid IS NOT NULL"
                    " AND notify_ms IS NULL)"
                )[0][0]
            )
        last = self.query("SELECT max(updated_at) FROM jobs")[0][0]
        updated = parse_time(last).astimezone(UTC).timestamp() if last else self.started_at
        return {"status": "HealthyBusy" if busy else "Healthy", "time_of_last_update": int(updated)}


def _json_list(text: str | None) -> list[Any]:
    return json.loads(text) if text else []


def workspace_file(workspace: Path, name: str, limit: int) -> str:
    """Validate a ``promptFile``: a regular, non-empty file of at most ``limit`` bytes inside the
    workspace (after resolving links), not under ``.foldline/``. Returns it relative.

    Raises:
        ValueError: with the reason, for a 400.
    """
    if not name or "\0" in name:
        raise ValueError("promptFile must be a non-empty workspace-relative path")
    root = workspace.resolve()
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError("promptFile must be relative to the workspace, without '..'")
    target = (root / name).resolve()
    if not target.is_relative_to(root):
        raise ValueError("promptFile resolves outside the workspace")
    if ".foldline" in target.relative_to(root).parts:
        raise ValueError("promptFile may not be under .foldline/")
    if not target.is_file():
        raise ValueError("promptFile is not a regular file")
    size = target.stat().st_size
    if size == 0 or size > limit:
        raise ValueError(f"promptFile must hold 1 to {limit} bytes, it has {size}")
    return str(target.relative_to(root))
