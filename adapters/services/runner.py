"""Executes one job run (design.md §7): feeds the prompt, streams output, records the outcome.

Runs in a thread of the worker that dispatched the job. Live output is appended as
``job.output`` events every ``output_flush_s``; the final stdout is the result, exit 0 means
``ok``. While the run lasts, the job is watched: superseded or cancelled work is killed (whole
group), and a cancel is confirmed once the process is gone. A timed-out run is killed and ends
``error``. Nothing here raises into the caller: failures are logged and recorded.

A finish that settled its session's reply pointer is the reply an ``/invocations`` caller was
owed (``pointer.is_owed_reply``, read from the finish's own commit): only that one is handed
on to the notify hook.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from adapters.services.run_channel import (
    Deliveries,
    Signals,
    prompt_line,
    record_said,
    without_signals,
)
from adapters.services.writers import WriterRun
from adapters.system.processes import GatedProcess, kill_group
from adapters.system.run_io import RunIO
from engine.domain import commands as c
from engine.domain.channel import INPUT_LINES
from engine.domain.engine import DomainEngine
from engine.domain.job import FileEntry
from engine.domain.job import JobState as J
from engine.domain.rules.pointer import is_owed_reply
from engine.engine import CommandResult
from engine.errors import EngineError, StorageFull
from projections import queries

log = logging.getLogger("foldline.runner")
TAIL = 1000
# Job states in which the run must stop: it is no longer wanted.
ENDED = frozenset({J.SUPERSEDED, J.CANCELLING, J.CANCELLED})


@dataclass(frozen=True)
class Run:
    job_id: str
    session_id: str
    run_id: str
    prompt: bytes
    process: GatedProcess
    writer: WriterRun | None = None  # a writer's worktree: its patch is taken at the end
    # "lines": the run takes controls while it runs (``adapters.services.run_channel``)
    input: str = ""
    resumed: bool = False


WARNING = "WARNING: "
MAX_WARNINGS = 100


def warnings_of(result: str) -> tuple[str, ...]:
    """``WARNING: <text>`` lines of the output: an ``ok`` run that has them "completed with
    warnings" (design.md §4.4). At most 100, each at most 1000 characters."""
    texts = (
        line[len(WARNING) :].strip()[:1000]
        for line in result.splitlines()
        if line.startswith(WARNING)
    )
    return tuple(text for text in texts if text)[:MAX_WARNINGS]


def files_manifest(result: str, workspace: Path) -> tuple[FileEntry, ...]:
    """``MEDIA:<path>`` lines naming regular files inside the workspace, with their sizes: the
    path as printed, and the same file relative to the workspace."""
    files = []
    root = workspace.resolve()
    for line in result.splitlines():
        if not line.startswith("MEDIA:"):
            continue
        name = line[len("MEDIA:") :].strip()
        target = (root / name).resolve()
        if target.is_file() and target.is_relative_to(root) and ".foldline" not in target.parts:
            files.append(
                FileEntry(
                    path=name,
                    size=target.stat().st_size,
                    workspace_path=str(target.relative_to(root)),
                )
            )
    return tuple(files)


def run_to_end(
    engine: DomainEngine,
    run: Run,
    workspace: Path,
    *,
    timeout_s: float | None,
    flush_s: float,
    on_reply: Callable[[str, str, str], None],
    stopping: threading.Event,
) -> None:
    """Run to the end and record it. ``on_reply(job_id, status, result)`` follows an ``ok`` or
    ``error`` finish that was the reply an ``/invocations`` caller was owed (the notify hook);
    a worker's, an A2A task's, a superseded or a cancelled job's end never calls it. When
    ``stopping`` is set (the server is shutting down) the run is killed and nothing is
    recorded: the job stays ``running``, cut off, for recovery to resume."""
    process = run.process
    assert process.process.stdout is not None and process.process.stderr is not None
    io = RunIO(process.process)
    io.start()
    channel = run.input == INPUT_LINES
    prompt = prompt_line(run.prompt, run.resumed) if channel else run.prompt
    feeder = _open_gate(process, prompt, keep_open=channel)
    signals = Signals(run.job_id, run.run_id) if channel else None
    deliveries = None
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    stopped_because, frozen = None, False
    while not io.ended.wait(flush_s):
        _take_output(engine, run.job_id, decoder.decode(io.take_new()), signals)
        state = _job_state(engine, run.job_id)
        if channel and deliveries is None and (feeder is None or not feeder.is_alive()):
            deliveries = Deliveries(engine, run.job_id, run.run_id, process.process.stdin)
        if deliveries is not None and state not in ENDED:  # no control into unwanted work
            deliveries.pump()
        if (state == J.PAUSED) != frozen:  # a paused job's group is stopped, not killed
            frozen = state == J.PAUSED
            kill_group(process.pid, signal.SIGSTOP if frozen else signal.SIGCONT)
        stopped_because = "shutdown" if stopping.is_set() else (state if state in ENDED else None)
        if stopped_because is None and deadline is not None and time.monotonic() > deadline:
            stopped_because = "timeout"
        if stopped_because:
            kill_group(process.pid)
            break
    exit_code = process.process.wait()
    kill_group(process.pid)  # anything the run left behind in its group
    io.join(timeout=5)
    if feeder is not None:
        feeder.join(timeout=5)
    # A channel run's stdin is still open; a feeder still blocked on it (something of the run
    # escaped its group and holds the pipe) owns it, and would hold the close up.
    if channel and process.process.stdin is not None and not (feeder and feeder.is_alive()):
        with contextlib.suppress(OSError):
            process.process.stdin.close()
    for stream in (process.process.stdout, process.process.stderr):
        stream.close()
    if stopped_because == "shutdown" or stopping.is_set():
        return
    last_output = decoder.decode(io.take_new(), final=True)
    result = io.stdout().decode("utf-8", errors="replace")
    if signals is not None:  # its signals are recorded in order before its end; no result
        said = signals.take(last_output, final=True)
        tail = said.pop() if said and isinstance(said[-1], str) else None
        record_said(engine, run.job_id, said)
        last_output = tail if isinstance(tail, str) else ""
        result = without_signals(result)
    _record_end(
        engine,
        run,
        workspace,
        exit_code,
        last_output,
        result,
        stopped_because,
        io.stderr()[-TAIL:].decode("utf-8", errors="replace"),
        timeout_s,
        on_reply,
        stopping,
    )


def _open_gate(
    process: GatedProcess, prompt: bytes, keep_open: bool = False
) -> threading.Thread | None:
    """Let the run start with ``prompt`` on its stdin. What fits in a pipe's atomic write
    cannot block on the fresh, empty pipe, so it is written here; a longer prompt is fed by a
    thread while the output is read (the child may write before it has read it all)."""
    if len(process.gated_input(prompt)) <= select.PIPE_BUF:
        process.open_gate(prompt, keep_open)
        return None
    feeder = threading.Thread(target=process.open_gate, args=(prompt, keep_open), daemon=True)
    feeder.start()
    return feeder


def _take_output(engine: DomainEngine, job_id: str, text: str, signals: Signals | None) -> None:
    """Publish a tick's output; a channel run's signals are taken out and recorded with it,
    in order, in one commit."""
    if signals is None:
        _publish(engine, job_id, text)
    else:
        record_said(engine, job_id, signals.take(text))


def _publish(engine: DomainEngine, job_id: str, text: str) -> None:
    if text:
        try:
            engine.handle(c.RecordJobOutput(job_id=job_id, text=text))
        except EngineError as ex:  # the job moved on (superseded, cancelled): drop the chunk
            log.debug("output of %s not recorded: %s", job_id, ex)


def _finish(
    engine: DomainEngine, job_id: str, last_output: str, finish: c.FinishJob
) -> CommandResult:
    """The run's last output, then its finish, in one commit: one sync, and one wake-up of a
    sync caller, instead of two (ADR 0027). If the log refuses either, the two steps as they
    were: the output alone (dropped if the job moved on), then the finish, whose refusal is
    the caller's to handle. Returns what the finish appended."""
    if last_output:
        try:
            output = c.RecordJobOutput(job_id=job_id, text=last_output)
            return engine.handle_all([output, finish])[-1]
        except StorageFull:
            raise  # tried again whole (``_finish_when_room``): the output alone would repeat
        except EngineError:
            _publish(engine, job_id, last_output)
    return engine.handle(finish)


# How long a finish refused for a full disk waits before it is tried again.
FULL_RETRY_S = 1.0


def _finish_when_room(
    engine: DomainEngine,
    job_id: str,
    last_output: str,
    finish: c.FinishJob,
    stopping: threading.Event,
) -> CommandResult | None:
    """``_finish``, tried again while the disk is full: the run's end is known and held here,
    and space comes back when an operator frees it, without a restart. Returns what the
    finish appended, or None if the server stops first: the job stays ``running``, cut off,
    for recovery, as at any stop."""
    said = False
    while True:
        try:
            return _finish(engine, job_id, last_output, finish)
        except StorageFull as ex:
            if not said:
                log.warning("the end of %s waits for room in the log: %s", job_id, ex)
                said = True
            if stopping.wait(FULL_RETRY_S):
                return None


def _job_state(engine: DomainEngine, job_id: str) -> str | None:
    return queries.job_state(engine.log.connection(), job_id)


def _was_owed_reply(engine: DomainEngine, job_id: str, finished: CommandResult) -> bool:
    """Whether the commit that finished ``job_id`` settled its session's pointer at it, read
    back from that commit's events (a handful: the finish, the pointer, an A2A task's end)."""
    count = finished.last_position - finished.first_position + 1
    events = engine.log.read_all(after_position=finished.first_position - 1, limit=count)
    return is_owed_reply(job_id, (e.event for e in events))


def _record_end(
    engine: DomainEngine,
    run: Run,
    workspace: Path,
    exit_code: int,
    last_output: str,
    result: str,
    stopped_because: str | None,
    stderr_tail: str,
    timeout_s: float | None,
    on_reply: Callable[[str, str, str], None],
    stopping: threading.Event,
) -> None:
    try:
        if stopped_because in ENDED:
            _publish(engine, run.job_id, last_output)
            if stopped_because == J.CANCELLING:
                engine.handle(c.ConfirmJobCancelled(job_id=run.job_id))
            return
        if stopped_because == "timeout":
            result = f"{result}\n[foldline: run killed after {timeout_s:g} s timeout]".lstrip()
        outcome = "ok" if exit_code == 0 and stopped_because is None else "error"
        if outcome == "error" and not result.strip() and stderr_tail:
            result = stderr_tail
        patch = None
        if run.writer is not None:
            outcome, result, patch = run.writer.judge(outcome, result)
        finish = c.FinishJob(
            job_id=run.job_id,
            run_id=run.run_id,
            outcome=outcome,
            result=result[: 1 << 20],
            files=files_manifest(result, workspace),
            exit_code=exit_code,
            warnings=warnings_of(result),
            patch=patch,
        )
        finished = _finish_when_room(engine, run.job_id, last_output, finish, stopping)
        if finished is None:
            return
    except EngineError as ex:  # first writer wins: the job ended another way meanwhile
        log.info("job %s ended elsewhere: %s", run.job_id, ex)
        if _job_state(engine, run.job_id) == "cancelling":
            engine.handle(c.ConfirmJobCancelled(job_id=run.job_id))
        return
    if _was_owed_reply(engine, run.job_id, finished):
        on_reply(run.job_id, outcome, result)
