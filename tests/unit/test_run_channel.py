"""The server's side of a run's live channel (adapters.services.run_channel, ADR 0038) on a real log
file and a real pipe: a control is delivered only once its whole line is in the pipe, exactly once;
a closed pipe loses what was on its way; ``FOLDLINE:`` lines become signals, in order."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.services.run_channel import Signals, prompt_line, recorded, without_signals
from adapters.services.run_deliveries import Deliveries, record_said
from engine.domain import channel as ch
from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.domain.errors import NoChannel
from projections import open_engine, queries

PIPE = 4096  # the smallest pipe Linux makes: a few lines overflow it


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[DomainEngine]:
    made = open_engine(tmp_path / "log.db")
    made.handle(c.CreateSession(session_id="s1", start_run_id="r1"))
    made.handle(c.AcceptJob(job_id="j1", session_id="s1", owed=False))
    made.handle(c.StartJob(job_id="j1", run_id="run1", input="lines"))
    yield made
    made.log.close()


@pytest.fixture
def pipe() -> Iterator[tuple[int, Any]]:
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PIPE)
    writer = os.fdopen(write, "wb")
    yield read, writer
    os.close(read)
    writer.close()


def states(engine: DomainEngine) -> list[str]:
    return [r.state for r in reversed(queries.controls(engine.log.connection(), "j1"))]


def drain(read: int) -> bytes:
    """What the pipe holds now, taken out."""
    os.set_blocking(read, False)
    data = b""
    while True:
        try:
            chunk = os.read(read, 65536)
        except BlockingIOError:
            return data
        if not chunk:
            return data
        data += chunk


def test_prompt_is_the_first_json_line() -> None:
    line = prompt_line(b"fix the bug\nplease", resumed=True)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"type": "prompt", "text": "fix the bug\nplease", "resumed": True}


def test_deliveries_record_a_control_once_its_whole_line_is_in_the_pipe(
    engine: DomainEngine, pipe: tuple[int, Any]
) -> None:
    read, writer = pipe
    sent = [
        engine.handle(ch.SendControl(job_id="j1", action="finalize", text=t * 3000)).first_position
        for t in "ab"
    ]
    deliveries = Deliveries(engine, "j1", "run1", writer)
    deliveries.pump()
    assert states(engine) == ["delivered", "pending"]  # the second line fits only in part
    read_so_far = drain(read)
    assert read_so_far.count(b"\n") == 1  # the first line whole, the second begun
    deliveries.pump()  # the rest of the second line goes, and only then is it delivered
    assert states(engine) == ["delivered", "delivered"]
    deliveries.pump()  # nothing is written twice
    lines = [json.loads(line) for line in (read_so_far + drain(read)).splitlines()]
    assert [(m["id"], m["type"], m["text"]) for m in lines] == [
        (sent[0], "finalize", "a" * 3000),
        (sent[1], "finalize", "b" * 3000),
    ]
    kinds = [e.event_type for e in engine.log.read_stream("job:j1")]
    assert kinds.count("job.control_delivered") == 2


def test_deliveries_to_a_run_that_closed_its_input_are_lost(engine: DomainEngine) -> None:
    read, write = os.pipe()
    os.close(read)  # the run is gone, or closed its stdin
    engine.handle(ch.SendControl(job_id="j1", action="effort", effort="low"))
    deliveries = Deliveries(engine, "j1", "run1", os.fdopen(write, "wb"))
    deliveries.pump()
    assert deliveries.closed and states(engine) == ["lost"]
    # The job's channel is closed with it: a control sent now is refused, not lost later.
    with pytest.raises(NoChannel, match="runs without input"):
        engine.handle(ch.SendControl(job_id="j1", action="effort", effort="high"))


def test_signals_are_taken_out_of_the_output_in_order(engine: DomainEngine) -> None:
    signals = Signals("j1", "run1")
    said = signals.take('one\nFOLDLINE: {"type": "turn_started", "turn": 1}\ntwo\nthr')
    assert said[0] == "one\n" and said[2] == "two\n"
    assert isinstance(said[1], ch.RecordRunSignal) and said[1].turn == "1"
    unknown = 'FOLDLINE: {"type": "nope"}\n'  # not a signal: output like any line
    missing = 'FOLDLINE: {"type": "turn_started"}\n'  # a signal without its turn: output
    assert signals.take("ee\n" + unknown + missing) == ["three\n" + unknown + missing]
    assert signals.take("FOLDLINE: not json", final=True) == ["FOLDLINE: not json"]
    # A question holding a line break other than \n (json.dumps writes U+2028 raw) is whole.
    ask = {"type": "input_required", "request": "q", "question": "which\u2028one?"}
    question = signals.take(f"FOLDLINE: {json.dumps(ask, ensure_ascii=False)}\n")
    assert isinstance(question[0], ch.RecordRunSignal) and question[0].question == "which\u2028one?"
    record_said(engine, "j1", [*said, *question])
    row = queries.job(engine.log.connection(), "j1")
    assert row is not None and (row.turn, row.pending_requests) == ("1", 1)
    kinds = [e.event_type for e in engine.log.read_stream("job:j1")][-4:]
    assert kinds == ["job.output", "job.turn_started", "job.output", "job.input_requested"]


def test_a_hostile_signal_line_is_output_and_never_raises() -> None:
    deep = "FOLDLINE: " + "[" * 100_000 + "\n"  # json.loads would recurse out of its stack
    long_text = json.dumps({"type": "progress", "text": "x" * 5000})
    signals = Signals("j1", "run1")
    assert signals.take(deep) == [deep]
    [progress] = signals.take(f"FOLDLINE: {long_text}\n")
    assert isinstance(progress, ch.RecordRunSignal) and len(progress.text) == ch.RUN_TEXT_LIMIT
    assert without_signals(deep) == deep


def test_a_tick_of_many_progress_lines_records_the_last_one() -> None:
    lines = "".join(f'FOLDLINE: {{"type": "progress", "text": "{n}"}}\n' for n in range(50))
    commands = recorded(Signals("j1", "run1").take(f"a\n{lines}b\n"), "j1")
    assert [type(cmd).__name__ for cmd in commands] == [
        "RecordJobOutput",
        "RecordRunSignal",
        "RecordJobOutput",
    ]
    assert commands[1].text == "49"  # type: ignore[attr-defined]


def test_the_result_keeps_everything_but_valid_signals() -> None:
    out = 'a\nFOLDLINE: {"type": "progress", "text": "half"}\nFOLDLINE: {bad\nb\n'
    assert without_signals(out) == "a\nFOLDLINE: {bad\nb\n"
