"""An example agent that says what it answers (ADR 0054), beyond its text: artifacts of any
parts, a direct message, a refusal, a request for authorization.
``FOLDLINE_RUNNER="<venv>/bin/python -m adapters.programs.answer_agent"``; it works as a
one-shot agent (the default) and on the live channel (``FOLDLINE_RUNNER_INPUT=lines``).

Each answer is one stdout line ``FOLDLINE: {json}``, kept out of the result. A one-shot run's
are read when it ends; a channel run's are recorded as it prints them. What it does depends on
the first word of its prompt:

- ``artifacts``: a ``data`` artifact, a file by its URL, a file by its bytes, and a text
  artifact in three chunks of its own (``append``, ``lastChunk``);
- ``message``: answers with a direct message (a text and a data part) instead of a task;
- ``reject``: refuses the task, with the rest of the prompt as the reason;
- ``auth``: asks for authorization (the task is ``auth-required``); the caller's next message
  on the task is the answer. One-shot, the run ends and the next message starts a new run with
  both messages on stdin; on the channel, the answer comes in as a ``respond`` control;
- anything else: says it and ends.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any


def say(line: str) -> None:
    print(line, flush=True)


def answer(kind: str, **fields: Any) -> None:
    """A line foldline records as what the run answers, not as its output."""
    say("FOLDLINE: " + json.dumps({"type": kind, **fields}))


def artifacts() -> None:
    answer("artifact", artifactId="figures", name="figures", parts=[{"data": {"total": 42}}])
    report = {"url": "https://example.com/report.pdf", "filename": "report.pdf"}
    answer("artifact", artifactId="report", parts=[{**report, "mediaType": "application/pdf"}])
    raw = base64.b64encode(b"a,b\n1,2\n").decode()
    csv = {"raw": raw, "filename": "table.csv", "mediaType": "text/csv"}
    answer("artifact", artifactId="table", parts=[csv])
    for n, (text, last) in enumerate((("Hel", False), ("lo, wor", False), ("ld", True))):
        answer("artifact", artifactId="story", parts=[{"text": text}], append=n > 0, lastChunk=last)
    say("made four artifacts")


def main() -> int:
    first = sys.stdin.readline()
    try:
        prompt = json.loads(first)
    except ValueError:
        prompt = None
    channel = isinstance(prompt, dict) and prompt.get("type") == "prompt"
    text = str(prompt.get("text", "")) if channel and isinstance(prompt, dict) else first.strip()
    later = [] if channel else [line.strip() for line in sys.stdin if line.strip()]
    word, _, rest = text.partition(" ")
    if word == "artifacts":
        artifacts()
    elif word == "message":
        answer("message", parts=[{"text": f"hello, {rest or 'you'}"}, {"data": {"greeted": True}}])
    elif word == "reject":
        answer("reject", reason=rest or "not a task for this agent")
    elif word == "auth" and later:  # one-shot, run again with the caller's answer
        say(f"authorized with {later[-1]}")
    elif word == "auth":
        answer("auth_required", request="a1", question="sign in, then send your token")
        if channel:
            for line in sys.stdin:
                control = json.loads(line)
                if control.get("type") == "respond":
                    say(f"authorized with {control['response'].get('text', '')}")
                    break
    else:
        say(f"done: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
