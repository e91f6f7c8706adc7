"""An example agent that speaks the live channel (ADR 0038), small enough to read in one go:
``FOLDLINE_RUNNER="<venv>/bin/python -m adapters.programs.channel_agent"`` with
``FOLDLINE_RUNNER_INPUT=lines`` (or ``input = "lines"`` for an agent of ``FOLDLINE_AGENTS_FILE``).

Its first stdin line is the prompt, ``{"type": "prompt", "text": ..., "resumed": ...}``; every
later line is a control with its ``id``. It says what it does on stdout, which becomes the
result, and tells foldline about its turns and questions with ``FOLDLINE: {json}`` lines,
which stay out of the result. What it does depends on the prompt:

- ``ask: <question>``: asks the question (request ``q1``), waits for the answer, says it, ends;
- ``wait``: works in turn ``t1`` and takes controls until ``finalize``, a message ``done``, or
  the end of its stdin; each message starts the next turn, and a steer or interrupt for a turn
  that is over is ignored (foldline checks the turn when it records the control; the agent,
  which knows best, checks again when it reads it);
- anything else: answers at once and ends.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def say(line: str) -> None:
    print(line, flush=True)


def signal(kind: str, **fields: Any) -> None:
    """A line foldline records as the run's signal, not as its output."""
    say("FOLDLINE: " + json.dumps({"type": kind, **fields}))


def controls() -> Any:
    """The controls on stdin, one JSON object per line, until it ends."""
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def main() -> int:
    prompt = json.loads(sys.stdin.readline() or "{}")
    text = str(prompt.get("text", ""))
    if prompt.get("resumed"):
        say("(resumed after a restart)")
    turn, number = "t1", 1
    signal("turn_started", turn=turn)
    if text.startswith("ask: "):
        signal("input_required", request="q1", question=text[len("ask: ") :])
        for control in controls():
            if control["type"] == "respond":
                say(f"answer to {control['request']}: {control['response'].get('text', '')}")
                break
        signal("turn_ended", turn=turn)
        return 0
    if not text.startswith("wait"):
        say(f"done: {text}")
        signal("turn_ended", turn=turn)
        return 0
    say(f"working on: {text}")
    for control in controls():
        kind, cid = control["type"], control["id"]
        if kind in ("steer", "interrupt") and control["turn"] != turn:
            say(f"{kind} {cid} ignored: turn {control['turn']} is over")  # a stale guard
            continue
        if kind == "message":
            if turn:
                signal("turn_ended", turn=turn)
            number += 1
            turn = f"t{number}"
            signal("turn_started", turn=turn)
            say(f"message {cid} in {turn}: {control['text']}")
            if control["text"].strip() == "done":
                break
        elif kind == "steer":
            say(f"steer {cid} in {control['turn']}: {control['text']}")
        elif kind == "interrupt":
            signal("turn_ended", turn=turn)
            say(f"interrupt {cid}: {turn} stopped")
            turn = ""
        elif kind == "effort":
            say(f"effort {cid}: {control['effort']}")
        elif kind == "respond":
            say(f"respond {cid} to {control['request']}: {json.dumps(control['response'])}")
        elif kind == "finalize":
            say(f"finalize {cid}: {control['text']}")
            break
        signal("progress", text=f"took control {cid}")
    if turn:
        signal("turn_ended", turn=turn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
