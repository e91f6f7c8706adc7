"""The server's side of a run's live channel (ADR 0038), for a run whose agent takes input.

Into the run: its stdin starts with the prompt as one JSON line, ``{"type": "prompt", ...}``,
and stays open; every control recorded for the job (``job.control``) is written after it as one
JSON line carrying the control's id, in the order they were recorded. The pipe is written
without blocking, so an agent that does not read holds up nothing but its own controls; a
control is recorded delivered (``job.control_delivered``) once its whole line is in the pipe,
never before, so a crash in between leaves it pending for the next run of the job, and a
delivered one is never written again. A run that closed its stdin gets nothing more: what was
on its way is recorded lost.

Out of the run: a stdout line ``FOLDLINE: {json}`` is a signal (``turn_started``,
``turn_ended``, ``input_required``, ``progress``), recorded as such and kept out of the output
and the result. Anything else is output, as for any run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

import msgspec

from engine.domain import channel as ch
from engine.domain.engine import DomainEngine
from engine.errors import EngineError
from projections import queries

log = logging.getLogger("foldline.channel")

SIGNAL = "FOLDLINE: "
SIGNALS = ("turn_started", "turn_ended", "input_required", "progress")


def prompt_line(prompt: bytes, resumed: bool) -> bytes:
    """The first line a channel run reads: its prompt, as JSON."""
    text = prompt.decode("utf-8", errors="replace")
    body = {"type": "prompt", "text": text, "resumed": resumed}
    return json.dumps(body, ensure_ascii=False).encode() + b"\n"


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
        self.closed = False

    def pump(self) -> None:
        """Take the controls recorded since, write what the pipe takes, record what it took
        whole. Refusals by the log (the job moved on) are logged: the job's end settles them."""
        if self.closed:
            self._lose(c.control for c in self._new())
            return
        for control in self._new():
            self._buffer += control.body.encode() + b"\n"
            self._queued.append((control.control, len(self._buffer)))
        if not self._buffer:
            return
        try:
            written = os.write(self._fd, self._buffer)
        except BlockingIOError:
            return
        except (BrokenPipeError, OSError) as ex:
            log.info("run %s of %s closed its input: %s", self._run_id, self._job_id, ex)
            self.close()
            self._lose(control for control, _ in self._queued)
            self._queued, self._buffer = [], b""
            return
        self._buffer = self._buffer[written:]
        done = [control for control, end in self._queued if end <= written]
        self._queued = [(control, end - written) for control, end in self._queued[len(done) :]]
        self._record(
            [
                ch.RecordControlDelivered(job_id=self._job_id, control=control, run_id=self._run_id)
                for control in done
            ]
        )

    def _new(self) -> list[queries.ControlRow]:
        pending = queries.pending_controls(self._engine.log.connection(), self._job_id)
        new = [control for control in pending if control.control not in self._taken]
        self._taken.update(control.control for control in new)
        return new

    def _lose(self, controls: Iterator[int] | Any) -> None:
        self._record(
            [
                ch.RecordControlLost(
                    job_id=self._job_id, control=control, reason="the run closed its input"
                )
                for control in controls
            ]
        )

    def _record(self, commands: list[Any]) -> None:
        if not commands:
            return
        try:
            self._engine.handle_all(commands)
        except EngineError as ex:  # one by one: the others still count
            log.debug("channel of %s: %s", self._job_id, ex)
            for command in commands:
                try:
                    self._engine.handle(command)
                except EngineError as one:
                    log.info("channel of %s: %s not recorded: %s", self._job_id, command, one)

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self._stdin.close()


def _signal(line: str, job_id: str, run_id: str) -> ch.RecordRunSignal | None:
    """The command a ``FOLDLINE:`` line asks for, or None when it is not a valid signal."""
    try:
        body = json.loads(line[len(SIGNAL) :])
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("type") not in SIGNALS:
        return None
    request = body.get("request")
    fields = {
        "turn": _id(body.get("turn")),
        "request": _id(request),
        "question": body.get("question", ""),
        "text": body.get("text", ""),
    }
    try:
        return msgspec.convert(
            {"job_id": job_id, "run_id": run_id, "signal": body["type"], **fields},
            ch.RecordRunSignal,
        )
    except msgspec.ValidationError:
        return None


def _id(value: Any) -> Any:
    """A turn or request id may be a number on the wire; it is kept as text."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


Said = list[str | ch.RecordRunSignal]
"""What a run said, in its order: runs of output text, and signals."""


class Signals:
    """Splits a channel run's stdout into output text and signals, line by line."""

    def __init__(self, engine: DomainEngine, job_id: str, run_id: str) -> None:
        self._engine, self._job_id, self._run_id = engine, job_id, run_id
        self._partial = ""

    def take(self, text: str, final: bool = False) -> Said:
        """What ``text`` says, in order (a line is held back until it is whole, or
        ``final``): output text between the signals, adjacent lines joined."""
        text, self._partial = self._partial + text, ""
        lines = text.splitlines(keepends=True)
        if lines and not final and not lines[-1].endswith(("\n", "\r")):
            self._partial = lines.pop()
        said: Said = []
        for line in lines:
            signal = _signal(line, self._job_id, self._run_id) if line.startswith(SIGNAL) else None
            if signal is not None:
                said.append(signal)
            elif said and isinstance(said[-1], str):
                said[-1] += line
            else:
                said.append(line)
        return said

    def record(self, signal: ch.RecordRunSignal) -> None:
        try:
            self._engine.handle(signal)
        except EngineError as ex:  # a turn that is not the active one, a job moved on
            log.info("signal of %s not recorded: %s", self._job_id, ex)


def without_signals(result: str) -> str:
    """A channel run's result: its stdout without the valid ``FOLDLINE:`` lines."""
    return "".join(
        line
        for line in result.splitlines(keepends=True)
        if not (line.startswith(SIGNAL) and _signal(line, "j", "r") is not None)
    )
