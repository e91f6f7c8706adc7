"""The lines of a run's live channel (ADR 0038): written and read here, recorded elsewhere.

For a run whose agent takes input. Nothing here records anything: the run's owner
(``adapters.services.run``) does.

Into the run: its stdin starts with the prompt as one JSON line, ``{"type": "prompt", ...}``,
and stays open; every control recorded for the job (``job.control``) is written after it as one
JSON line carrying the control's id, in the order they were recorded (``adapters.services.run``'s
``Deliveries``).

Out of the run: a stdout line ``FOLDLINE: {json}`` is a signal (``turn_started``,
``turn_ended``, ``input_required``, ``progress``), recorded in the order the run wrote it, with
the output between, in one commit per tick, and kept out of the output and the result. Any
other line, a malformed signal included, is output, as for any run.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from engine.domain import channel as ch
from engine.domain import commands as c

SIGNAL = "FOLDLINE: "
# Each signal, and the field it cannot go without.
SIGNALS = {
    "turn_started": "turn",
    "turn_ended": "turn",
    "input_required": "request",
    "progress": "text",
}
SIGNAL_LIMIT = 65_536  # characters: a longer FOLDLINE: line is output, never parsed


def prompt_line(prompt: bytes, resumed: bool) -> bytes:
    """The first line a channel run reads: its prompt, as JSON."""
    text = prompt.decode("utf-8", errors="replace")
    body = {"type": "prompt", "text": text, "resumed": resumed}
    return json.dumps(body, ensure_ascii=False).encode() + b"\n"


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


def without_signals(result: str) -> str:
    """A channel run's result: its stdout without the valid ``FOLDLINE:`` lines."""
    return "".join(line for line in _lines(result) if parse_signal(line) is None)
