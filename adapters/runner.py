"""Executes one job run (SPEC §7): feeds the prompt, streams output, records the outcome.

Runs in a thread of the worker that dispatched the job. Live output is appended as
``job.output`` events every ``output_flush_s``; the final stdout is the result, exit 0 means
``ok``. While the run lasts, the job is watched: superseded or cancelled work is killed (whole
group), and a cancel is confirmed once the process is gone. A timed-out run is killed and ends
``error``. Nothing here raises into the caller: failures are logged and recorded.
"""

from __future__ import annotations

import codecs
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from adapters.processes import GatedProcess, kill_group
from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.domain.job import FileEntry
from engine.domain.job import JobState as J
from engine.errors import EngineError
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


WARNING = "WARNING: "
MAX_WARNINGS = 100


def warnings_of(result: str) -> tuple[str, ...]:
    """``WARNING: <text>`` lines of the output: an ``ok`` run that has them "completed with
    warnings" (mmo-semantics §3.1). At most 100, each at most 1000 characters."""
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


class _Pump(threading.Thread):
    """Drains one pipe into memory so the child never blocks on a full pipe."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.chunks: list[bytes] = []
        self.lock = threading.Lock()
        self.taken = 0

    def run(self) -> None:
        while chunk := os.read(self.fd, 65536):
            with self.lock:
                self.chunks.append(chunk)

    def take_new(self) -> bytes:
        with self.lock:
            new = b"".join(self.chunks[self.taken :])
            self.taken = len(self.chunks)
        return new

    def everything(self) -> bytes:
        with self.lock:
            return b"".join(self.chunks)


def _watch_exit(process: subprocess.Popen[bytes]) -> threading.Event:
    """An event set the moment the process ends (a thread blocked in ``wait``), so a short run
    is recorded at once rather than at the next flush tick or poll."""
    ended = threading.Event()

    def wait() -> None:
        process.wait()
        ended.set()

    threading.Thread(target=wait, name=f"wait-{process.pid}", daemon=True).start()
    return ended


def run_to_end(
    engine: DomainEngine,
    run: Run,
    workspace: Path,
    *,
    timeout_s: float | None,
    flush_s: float,
    on_finished: Callable[[str, str, str], None],
    stopping: threading.Event,
) -> None:
    """Run to the end and record it. ``on_finished(job_id, status, result)`` follows an ``ok``
    or ``error`` finish (the notify hook). When ``stopping`` is set (the server is shutting
    down) the run is killed and nothing is recorded: the job stays ``running``, cut off, for
    recovery to resume."""
    process = run.process
    assert process.process.stdout is not None and process.process.stderr is not None
    out = _Pump(process.process.stdout.fileno())
    err = _Pump(process.process.stderr.fileno())
    out.start()
    err.start()
    feeder = threading.Thread(target=process.open_gate, args=(run.prompt,), daemon=True)
    feeder.start()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    stopped_because, frozen = None, False
    ended = _watch_exit(process.process)
    while not ended.wait(flush_s):
        _publish(engine, run.job_id, decoder.decode(out.take_new()))
        state = _job_state(engine, run.job_id)
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
    out.join(timeout=5)
    err.join(timeout=5)
    feeder.join(timeout=5)
    for stream in (process.process.stdout, process.process.stderr):
        stream.close()
    if stopped_because == "shutdown" or stopping.is_set():
        return
    _publish(engine, run.job_id, decoder.decode(out.take_new(), final=True))
    result = out.everything().decode("utf-8", errors="replace")
    _record_end(
        engine,
        run,
        workspace,
        exit_code,
        result,
        stopped_because,
        err.everything()[-TAIL:].decode("utf-8", errors="replace"),
        timeout_s,
        on_finished,
    )


def _publish(engine: DomainEngine, job_id: str, text: str) -> None:
    if text:
        try:
            engine.handle(c.RecordJobOutput(job_id=job_id, text=text))
        except EngineError as ex:  # the job moved on (superseded, cancelled): drop the chunk
            log.debug("output of %s not recorded: %s", job_id, ex)


def _job_state(engine: DomainEngine, job_id: str) -> str | None:
    return queries.job_state(engine.log.connection(), job_id)


def _record_end(
    engine: DomainEngine,
    run: Run,
    workspace: Path,
    exit_code: int,
    result: str,
    stopped_because: str | None,
    stderr_tail: str,
    timeout_s: float | None,
    on_finished: Callable[[str, str, str], None],
) -> None:
    try:
        if stopped_because in ENDED:
            if stopped_because == J.CANCELLING:
                engine.handle(c.ConfirmJobCancelled(job_id=run.job_id))
            return
        if stopped_because == "timeout":
            result = f"{result}\n[foldline: run killed after {timeout_s:g} s timeout]".lstrip()
        outcome = "ok" if exit_code == 0 and stopped_because is None else "error"
        if outcome == "error" and not result.strip() and stderr_tail:
            result = stderr_tail
        engine.handle(
            c.FinishJob(
                job_id=run.job_id,
                run_id=run.run_id,
                outcome=outcome,
                result=result[: 1 << 20],
                files=files_manifest(result, workspace),
                exit_code=exit_code,
                warnings=warnings_of(result),
            )
        )
    except EngineError as ex:  # first writer wins: the job ended another way meanwhile
        log.info("job %s ended elsewhere: %s", run.job_id, ex)
        if _job_state(engine, run.job_id) == "cancelling":
            engine.handle(c.ConfirmJobCancelled(job_id=run.job_id))
        return
    on_finished(run.job_id, outcome, result)
