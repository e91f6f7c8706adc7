"""A channel run's controls in, and what it said recorded (ADR 0038): for ``adapters.services.run``.

Into a channel run, controls are written without blocking, and at most ``BUFFER`` bytes of them
are held here (the rest wait in the log), so an agent that does not read holds up nothing but
its own controls; a control is recorded delivered (``job.control_delivered``) once its whole
line is in the pipe, never before, and a record the log refused for a passing fault is tried
again. A run that closed its stdin gets nothing more: the control on its way is recorded lost,
which also closes the job's channel. The lines' format is ``adapters.services.run_channel``'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from typing import Any

from adapters.services.run_channel import Said, recorded
from engine.domain import channel as ch
from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.errors import EngineError, StorageError
from projections import queries

channel_log = logging.getLogger("foldline.channel")
BUFFER = 65_536  # bytes of control lines held here while the pipe is full


class Deliveries:
    """Writes a job's pending controls into its run's stdin and records each one delivered."""

    def __init__(self, engine: DomainEngine, job_id: str, run_id: str, stdin: Any) -> None:
        self._engine, self._job_id, self._run_id = engine, job_id, run_id
        self._stdin = stdin
        self._fd = stdin.fileno()
        os.set_blocking(self._fd, False)
        self._buffer = b""  # lines taken and not yet whole in the pipe
        self._queued: list[tuple[int, int]] = []  # (control, where its line ends in _buffer)
        self._taken: set[int] = set()
        self._unrecorded: list[c.Command] = []  # whole in the pipe, their record refused
        self.closed = False

    def pump(self) -> None:
        """Record what an earlier tick could not, take the controls recorded since (while
        the buffer has room), write what the pipe takes, record what it took whole."""
        self._unrecorded = record(self._engine, self._job_id, self._unrecorded)
        if self.closed:
            self._lose([row.control for row in self._new()])
            return
        if len(self._buffer) < BUFFER:
            for row in self._new():
                self._buffer += row.body.encode() + b"\n"
                self._queued.append((row.control, len(self._buffer)))
        if not self._buffer:
            return
        try:
            written = os.write(self._fd, self._buffer)
        except BlockingIOError:
            return
        except OSError as ex:  # EPIPE: the run closed its stdin, or is gone
            channel_log.info("run %s of %s closed its input: %s", self._run_id, self._job_id, ex)
            self.close()
            self._lose([control for control, _ in self._queued])
            self._queued, self._buffer = [], b""
            return
        self._buffer = self._buffer[written:]
        done = [control for control, end in self._queued if end <= written]
        self._queued = [(control, end - written) for control, end in self._queued[len(done) :]]
        self._unrecorded += record(
            self._engine,
            self._job_id,
            [
                ch.RecordControlDelivered(job_id=self._job_id, control=control, run_id=self._run_id)
                for control in done
            ],
        )

    def _new(self) -> list[queries.ControlRow]:
        pending = queries.pending_controls(self._engine.log.connection(), self._job_id)
        new = [row for row in pending if row.control not in self._taken]
        self._taken.update(row.control for row in new)
        return new

    def _lose(self, controls: list[int]) -> None:
        reason = "the run closed its input"
        lost = [
            ch.RecordControlLost(job_id=self._job_id, control=n, reason=reason) for n in controls
        ]
        self._unrecorded += record(self._engine, self._job_id, lost)

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self._stdin.close()


def record_said(engine: DomainEngine, job_id: str, said: Said) -> None:
    """Record what a run said (``record``); what the log refuses is dropped: the job moved
    on, or a turn is not the active one."""
    record(engine, job_id, recorded(said, job_id))


def record(engine: DomainEngine, job_id: str, commands: Sequence[c.Command]) -> list[c.Command]:
    """Record ``commands`` in one commit, else one by one, logging each refusal. Returns those
    the log refused for a fault that may pass (a full disk), for the caller to try again."""
    if not commands:
        return []
    try:
        engine.handle_all(commands)
        return []
    except EngineError as ex:
        channel_log.debug("channel of %s, in one commit: %s", job_id, ex)
    again: list[c.Command] = []
    for command in commands:
        try:
            engine.handle(command)
        except EngineError as ex:
            name = type(command).__name__
            channel_log.info("channel of %s: %s not recorded: %s", job_id, name, ex)
            if _passing(ex):
                again.append(command)
    return again


def _passing(error: EngineError) -> bool:
    """A refusal that may pass (a full disk, a busy file), not one of the rules."""
    return isinstance(error, StorageError)
