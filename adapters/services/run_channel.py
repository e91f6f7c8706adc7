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

Answers (ADR 0054: ``artifact``, ``message``, ``reject``, ``auth_required``) are signals too,
and the only ones a run without a channel may give: there they are read from its final stdout
when it ends (as its ``MEDIA:`` lines are) and kept out of its result (``answers``), while a
channel run's are recorded as it says them. An answer line may be long (a file by its bytes):
up to ``ANSWER_LIMIT`` characters.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from engine.domain import answer
from engine.domain import channel as ch
from engine.domain import commands as c
from engine.errors import InvalidArgument

SIGNAL = "FOLDLINE: "
# Each signal, and the field it cannot go without.
SIGNALS = {
    "turn_started": "turn",
    "turn_ended": "turn",
    "input_required": "request",
    "progress": "text",
}
SIGNAL_LIMIT = 65_536  # characters: a longer FOLDLINE: line is output, never parsed
# The answers (ADR 0054), and what each cannot go without ("" nothing).
ANSWERS = {"artifact": "artifact_id", "message": "parts", "reject": "", "auth_required": ""}
ANSWER_LIMIT = 1 << 20  # characters of an answer line (its event is at most 1 MiB)
PART_KEYS = {"text", "data", "raw", "url", "filename", "mediaType"}
AUTH_REQUEST = "auth"  # an auth_required's request id when the run names none


def prompt_line(prompt: bytes, resumed: bool) -> bytes:
    """The first line a channel run reads: its prompt, as JSON."""
    text = prompt.decode("utf-8", errors="replace")
    body = {"type": "prompt", "text": text, "resumed": resumed}
    return json.dumps(body, ensure_ascii=False).encode() + b"\n"


def parse_signal(line: str, answers_only: bool = False) -> dict[str, Any] | None:
    """The fields of a ``FOLDLINE:`` line that is a valid signal, else None: a JSON object of a
    known type with the field it cannot go without (of an answer only, ``answers_only``).
    Text too long for the log is cut, not refused (a question must still put its task in
    ``input-required``)."""
    if not line.startswith(SIGNAL) or len(line) > ANSWER_LIMIT:
        return None
    if answers_only and not line.startswith(SIGNAL + "{"):
        return None  # what most lines of a run without a channel are not: no parse of them
    try:
        body = json.loads(line[len(SIGNAL) :])
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    kind = body.get("type")
    if kind in ANSWERS:
        return _answer(kind, body)
    if answers_only or kind not in SIGNALS or len(line) > SIGNAL_LIMIT:
        return None
    fields = {name: _text(body.get(name)) for name in ("turn", "request", "question", "text")}
    if not fields[SIGNALS[kind]]:
        return None
    fields["question"] = (fields["question"] or "")[:20_000]
    fields["text"] = (fields["text"] or "")[: ch.RUN_TEXT_LIMIT]
    return {"signal": kind, **fields}


def _answer(kind: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The fields of an answer (ADR 0054), its parts checked, else None. A file by its bytes
    past ``answer.RAW_LIMIT`` is sent as a data part that describes it (as a result file that
    does not fit is, ``adapters.http.a2a.result_files``)."""
    fields: dict[str, Any] = {"signal": kind}
    if kind in ("artifact", "message"):
        parts = _parts(body.get("parts"))
        if parts is None:
            return None
        fields["parts"] = parts
    if kind == "artifact":
        fields["artifact_id"] = _text(body.get("artifactId"))
        fields["name"] = _string(body.get("name"))[:200]
        fields["description"] = _string(body.get("description"))[: ch.RUN_TEXT_LIMIT]
        fields["append"] = body.get("append") is True
        fields["last_chunk"] = body.get("lastChunk") is True
    elif kind == "reject":
        fields["text"] = _string(body.get("reason"))[: ch.RUN_TEXT_LIMIT]
    elif kind == "auth_required":
        fields["request"] = _text(body.get("request")) or AUTH_REQUEST
        fields["question"] = _string(body.get("question"))[:20_000]
    required = ANSWERS[kind]
    if required and not fields[required]:
        return None
    try:
        if "parts" in fields:
            answer.check_parts(fields["parts"], kind)
    except InvalidArgument:
        return None
    return fields


def _parts(value: Any) -> tuple[answer.Part, ...] | None:
    """1.0 parts (``text``, ``data``, ``raw`` or ``url`` with ``filename``, ``mediaType``) as
    the domain's, else None."""
    if not isinstance(value, list):
        return None
    parts = []
    for item in value:
        if not isinstance(item, dict) or not set(item) <= PART_KEYS:
            return None
        fields = {k: item[k] for k in ("text", "data", "raw", "url", "filename") if k in item}
        if "mediaType" in item:
            fields["media_type"] = item["mediaType"]
        try:
            part = msgspec.convert(fields, answer.Part)
        except msgspec.ValidationError:
            return None
        parts.append(_fitting(part))
    return tuple(parts)


def _fitting(part: answer.Part) -> answer.Part:
    """A file by its bytes past the limit, as a data part describing it."""
    size = 0 if part.raw is None else answer.raw_size(part.raw)
    if size <= answer.RAW_LIMIT:
        return part
    description = {
        "omitted": "too_large",
        "filename": part.filename,
        "mediaType": part.media_type,
        "size": size,
        "message": f"the file is {size} bytes, over the {answer.RAW_LIMIT} bytes a run may"
        " send by its bytes: send it by a URL",
    }
    return answer.Part(data={k: v for k, v in description.items() if v is not None})


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


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


def answers(result: str, job_id: str, run_id: str) -> tuple[list[c.Command], str]:
    """What a run without a channel answers (ADR 0054), read from its final stdout: the
    commands that record its answer lines, in order, and its result without them (the same
    text when it has none)."""
    commands: list[c.Command] = []
    kept = []
    for line in _lines(result):
        fields = parse_signal(line, answers_only=True)
        signal = None
        if fields is not None:
            try:
                signal = msgspec.convert(
                    {"job_id": job_id, "run_id": run_id, **fields}, ch.RecordRunSignal
                )
            except msgspec.ValidationError:
                signal = None
        if signal is None:
            kept.append(line)
        else:
            commands.append(signal)
    return commands, "".join(kept) if commands else result
