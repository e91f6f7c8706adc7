"""The server's side of a run's live channel (ADR 0038), for a run whose agent takes input.

Into the run: its stdin starts with the prompt as one JSON line, ``{"type": "prompt", ...}``,
and stays open; every control recorded for the job (``job.control``) is written after it as one
JSON line carrying the control's id, in the order they were recorded. The pipe is written
without blocking, and at most ``BUFFER`` bytes of controls are held here (the rest wait in the
log), so an agent that does not read holds up nothing but its own controls; a control is
recorded delivered (``job.control_delivered``) once its whole line is in the pipe, never
before, and a record the log refused for a passing fault is tried again. A run that closed its
stdin gets nothing more: the control on its way is recorded lost, which also closes the job's
channel.

Out of the run: a stdout line ``FOLDLINE: {json}`` is a signal (``turn_started``,
``turn_ended``, ``input_required``, ``progress``), recorded in the order the run wrote it, with
the output between, in one commit per tick, and kept out of the output and the result. Any
other line, a malformed signal included, is output, as for any run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Sequence
from typing import Any

import msgspec

from engine.domain import channel as ch
from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.errors import EngineError, StorageError
from projections import queries

log = logging.getLogger("foldline.channel")

SIGNAL = "FOLDLINE: "
# Each signal, and the field it cannot go without.
SIGNALS = {
    "turn_started": "turn",
    "turn_ended": "turn",
    "input_required": "request",
    "progress": "text",
}
SIGNAL_LIMIT = 65_536  # characters: a longer FOLDLINE: line is output, never parsed
BUFFER = 65_536  # bytes of control lines held here while the pipe is full


def prompt_line(prompt: bytes, resumed: bool) -> bytes:
    """The first line a channel run reads: its prompt, as JSON."""
    text = prompt.decode("utf-8", errors="replace")
    body = {"type": "prompt", "text": text, "resumed": resumed}
    return json.dumps(body, ensure_ascii=False).encode() + b"\n"


def _passing(error: EngineError) -> bool:
    """A refusal that may pass (a full disk, a busy file), not one of the rules."""
    return isinstance(error, StorageError)


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
            log.info("run %s of %s closed its input: %s", self._run_id, self._job_id, ex)
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


def parse_signal(line: str) -> dict[str, Any] | None:
    """The fields of a ``FOLDLINE:`` line that is a valid signal, else None: a JSON object of a
    known type with the field it cannot go without. Text too long for the log is cut, not
    refused (a question must still put its task in ``input-required``)."""
    if not line.startswith(SIGNAL) or len(line) > SIGNAL_LIMIT:
        return None
    try:
        body = json.loads(line[len(SIGNAL) :])
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or body.get("type") not in SIGNALS:
        return None
    fields = {name: _text(body.get(name)) for name in ("turn", "request", "question", "text")}
    if not fields[SIGNALS[body["type"]]]:
        return None
    fields["question"] = (fields["question"] or "")[:20_000]
    fields["text"] = (fields["text"] or "")[: ch.RUN_TEXT_LIMIT]
    return {"signal": body["type"], **fields}


def _text(value: Any) -> str | None:
    """A turn or request id may be a number on the wire; it is kept as text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) else None


def _lines(text: str) -> list[str]:
    """``text`` cut after each ``\\n`` only: a question may hold any other line break."""
    parts = text.split("\n")
    return [f"{part}\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


Said = list[str | ch.RecordRunSignal]
"""What a run said, in its order: runs of output text, and signals."""


class Signals:
    """Splits a channel run's stdout into output text and signals, line by line."""

    def __init__(self, job_id: str, run_id: str) -> None:
        self._job_id, self._run_id = job_id, run_id
        self._partial = ""

    def take(self, text: str, final: bool = False) -> Said:
        """What ``text`` says, in order (a line is held back until it is whole, or
        ``final``): output text between the signals, adjacent lines joined."""
        lines = _lines(self._partial + text)
        self._partial = "" if final or not lines or lines[-1].endswith("\n") else lines.pop()
        said: Said = []
        for line in lines:
            signal = self._signal(line)
            if signal is not None:
                said.append(signal)
            elif said and isinstance(said[-1], str):
                said[-1] += line
            else:
                said.append(line)
        return said

    def _signal(self, line: str) -> ch.RecordRunSignal | None:
        fields = parse_signal(line)
        if fields is None:
            return None
        try:
            return msgspec.convert(
                {"job_id": self._job_id, "run_id": self._run_id, **fields}, ch.RecordRunSignal
            )
        except msgspec.ValidationError:  # an id outside its limits: the line stays output
            return None


def recorded(said: Said, job_id: str) -> list[c.Command]:
    """The commands that record ``said`` in order; of several progress signals only the last
    (a run that reports often must not make a commit of each)."""
    last_progress = max(
        (
            i
            for i, item in enumerate(said)
            if not isinstance(item, str) and item.signal == "progress"
        ),
        default=-1,
    )
    commands: list[c.Command] = []
    for i, item in enumerate(said):
        if isinstance(item, str):
            if item:
                commands.append(c.RecordJobOutput(job_id=job_id, text=item))
        elif item.signal != "progress" or i == last_progress:
            commands.append(item)
    return commands


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
        log.debug("channel of %s, in one commit: %s", job_id, ex)
    again: list[c.Command] = []
    for command in commands:
        try:
            engine.handle(command)
        except EngineError as ex:
            log.info("channel of %s: %s not recorded: %s", job_id, type(command).__name__, ex)
            if _passing(ex):
                again.append(command)
    return again


def without_signals(result: str) -> str:
    """A channel run's result: its stdout without the valid ``FOLDLINE:`` lines."""
    return "".join(line for line in _lines(result) if parse_signal(line) is None)
