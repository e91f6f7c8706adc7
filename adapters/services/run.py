"""One run of a job, from its gated start to its end: the run's one owner (design.md §7).

A ``Run`` holds the run's process, its live channel (ADR 0038) and every event the run records
for its job: the output, the signals (turns, questions, progress), the controls delivered into
it or lost, the finish or the confirmed cancel. Nothing else appends them. The dispatcher
spawns the process gated, hands it to a ``Run`` at once, records the job started, then gives
the run a thread (``adapters.services.dispatch``); recovery resumes a cut-off job through the
dispatcher, as a new run. ``Run.to_end`` reads top-down:

1. start: the gate opens with the prompt on stdin (a channel run's as one JSON line, its stdin
   kept open for controls);
2. watch, every ``output_flush_s`` until the process exits: the output so far is recorded
   (``job.output``; a channel run's signals with it, in order, in one commit); superseded or
   cancelled work is killed (whole group), a paused job's group stopped, continued or ended
   (``run_pause``), a run past its timeout killed; pending controls go into a channel run;
3. reap: the exit code, the group killed (whatever the run left behind), the pipes closed;
4. finish: a run without a channel's answers (ADR 0054: artifacts, a message, a refusal, a
   request for authorization), read from its final stdout, in one commit; then the last
   output and the finish in one commit; the final stdout is the result, exit
   0 means ``ok``, a timed-out run ends ``error``; a cancel is confirmed once the process is
   gone; a paused or lost run's end is ``run_pause.end_while_paused``'s. A commit that
   settled a session's reply pointer at a job it ended ``ok`` or ``error`` is the reply an
   ``/invocations`` caller was owed (``notify.replies_in``, read from that commit): only that
   one is handed on (``on_reply``, the notify hook). It is this job's finish, or, when this
   job was the last live one below a job that waited ``settling`` for its subtree (ADR
   0050), that job's end, made by this run's end;
5. release: a writer's worktree goes once its job is over (its patch is kept).

A stopping server kills the run and records nothing: the job stays ``running``, cut off, for
recovery to resume. Before that, the server's graceful stop asks the run to end
(``adapters.services.server_stop``): a run that ends meanwhile records its end as always; one
killed by a signal then records nothing, and the stop cancels it with what lingers (a run its
cancel killed confirms it). So does a run killed as its server dies (the worker that owns
it outlives its master a moment): it is cut off, for the next server's recovery, not recorded
lost. Nothing here raises into the caller: failures are logged and
recorded.

Into a channel run, the job's controls are written by ``adapters.services.run_deliveries``,
which also records what the run said.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.services.notify import replies_in
from adapters.services.run_channel import (
    Signals,
    answers,
    prompt_line,
    without_signals,
)
from adapters.services.run_deliveries import Deliveries, record, record_said
from adapters.services.run_pause import RETIRED, RunPause
from adapters.services.run_result import files_manifest, warnings_of
from adapters.services.writers import WriterRun
from adapters.settings import contracts
from adapters.system.processes import GatedProcess, kill_group
from adapters.system.run_io import RunIO
from engine.domain import channel as ch
from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.domain.job import TERMINAL
from engine.domain.job import JobState as J
from engine.engine import CommandResult
from engine.errors import EngineError, LogMissing, StorageFull
from projections import queries

log = logging.getLogger("foldline.runner")
TAIL = 1000
# Job states in which the run must stop: it is no longer wanted.
ENDED = frozenset({J.SUPERSEDED, J.CANCELLING, J.CANCELLED})
# How long a finish refused for a full disk waits before it is tried again.
FULL_RETRY_S = 1.0


@dataclass(frozen=True)
class RunSettings:
    """What every run of one server shares (the dispatcher's)."""

    workspace: Path
    timeout_s: float | None
    flush_s: float
    stopping: threading.Event  # set: the server is shutting down, the run records nothing more
    on_reply: Callable[[str, str, str], None]  # (job_id, status, result) of an owed reply
    # set: the server's graceful stop asked its runs to end; ``stopping`` follows its grace
    winding_down: threading.Event = field(default_factory=threading.Event)


class Run:
    """One run of a job: its process, its channel, and everything it records for the job.

    Made as soon as its process is spawned gated; then either ``abandon`` (its start was not
    recorded) or ``to_end`` (it was), once.
    """

    def __init__(
        self,
        engine: DomainEngine,
        settings: RunSettings,
        job_id: str,
        run_id: str,
        prompt: bytes,
        process: GatedProcess,
        *,
        writer: WriterRun | None = None,  # a writer's worktree: its patch is taken at the end
        input: str = "",  # "lines": the run takes controls while it runs (ADR 0038)
        resumed: bool = False,
        earlier: str = "",  # a resumed run: what the job's earlier runs recorded (ADR 0049)
        schema: dict[str, Any] | None = None,  # its agent's output schema (ADR 0065)
    ) -> None:
        self.job_id, self.run_id = job_id, run_id
        self.process = process
        self.writer = writer
        self._engine, self._settings = engine, settings
        # The server this run's owner serves (a gunicorn worker's master): gone, its runs are
        # cut off with it, not lost while it lives.
        self._server = os.getppid()
        self._prompt, self._resumed = prompt, resumed
        self._earlier = earlier
        self._schema = schema
        self._channel = input == ch.INPUT_LINES
        self._signals = Signals(job_id, run_id) if self._channel else None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pause = RunPause(engine, job_id, run_id, process.pid)

    @property
    def pid(self) -> int:
        return self.process.pid

    def abandon(self) -> None:
        """Never run it: its start was not recorded (the gate stays shut, the group goes)."""
        self.process.abandon()

    def to_end(self) -> None:
        """Run it to its end and record it, in the thread the dispatcher gives it; logs what
        fails (a bug here must not kill the worker: the job stays running)."""
        try:
            self._live()
        except LogMissing as ex:  # said once by the storage; the job's end cannot be recorded
            log.error("run of %s ended unrecorded: %s", self.job_id, ex)
        except Exception:
            log.exception("run of %s failed", self.job_id)
        else:
            self._release_if_ended()

    def _live(self) -> None:
        """Start, watch, reap, and record the end (an owed reply handed on with it)."""
        io, feeder = self._start()
        stopped_because = self._watch(io, feeder)
        exit_code = self._reap(io, feeder)
        if stopped_because == "shutdown" or self._settings.stopping.is_set():
            return  # cut off: the job stays running, for recovery
        if exit_code < 0 and stopped_because is None and os.getppid() != self._server:
            return  # killed as its server died (this worker outlives it a moment): cut off
        if exit_code < 0 and stopped_because is None and self._settings.winding_down.is_set():
            if self._job_state() != J.CANCELLING:
                return  # killed while the server stops (its SIGTERM): the stop cancels it
            stopped_because = J.CANCELLING  # the stop's cancel killed it: confirm it now
        last_output, result = self._last_words(io)
        stderr_tail = io.stderr()[-TAIL:].decode("utf-8", errors="replace")
        self._record_end(exit_code, last_output, result, stopped_because, stderr_tail)

    def _start(self) -> tuple[RunIO, threading.Thread | None]:
        """Start draining the pipes, then open the gate. Returns the pipes' watcher and the
        thread still feeding a long prompt, if any."""
        io = RunIO(self.process.process)
        io.start()
        prompt = prompt_line(self._prompt, self._resumed) if self._channel else self._prompt
        return io, _open_gate(self.process, prompt, keep_open=self._channel)

    def _watch(self, io: RunIO, feeder: threading.Thread | None) -> str | None:
        """Every flush tick until the process exits (see the module docstring). Returns why
        the run was killed: ``shutdown``, ``timeout`` or the state that no longer wants it;
        None if it exited by itself."""
        timeout_s = self._settings.timeout_s
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        deliveries = None
        pause = self._pause
        while not io.ended.wait(self._settings.flush_s):
            self._record_output(self._decoder.decode(io.take_new()))
            state = self._job_state()
            if self._channel and deliveries is None and (feeder is None or not feeder.is_alive()):
                stdin = self.process.process.stdin
                deliveries = Deliveries(self._engine, self.job_id, self.run_id, stdin)
            if deliveries is not None and state not in ENDED:  # no control into unwanted work
                deliveries.pump()
            pause.follow(state, deliveries is None or deliveries.closed)
            stopping = self._settings.stopping.is_set()
            stopped_because = "shutdown" if stopping else (state if state in ENDED else None)
            if stopped_because is None and deadline is not None and time.monotonic() > deadline:
                stopped_because = "timeout"
            if stopped_because is None and pause.is_past_grace():
                stopped_because = RETIRED
            if stopped_because:
                kill_group(self.pid)
                return stopped_because
        return None

    def _reap(self, io: RunIO, feeder: threading.Thread | None) -> int:
        """Wait for the exit, kill what the run left behind in its group, close its pipes.
        Returns the exit code."""
        child = self.process.process
        assert child.stdout is not None and child.stderr is not None
        exit_code = child.wait()
        kill_group(self.pid)
        io.join(timeout=5)
        if feeder is not None:
            feeder.join(timeout=5)
        # A channel run's stdin is still open; a feeder still blocked on it (something of the run
        # escaped its group and holds the pipe) owns it, and would hold the close up.
        if self._channel and child.stdin is not None and not (feeder and feeder.is_alive()):
            with contextlib.suppress(OSError):
                child.stdin.close()
        for stream in (child.stdout, child.stderr):
            stream.close()
        return exit_code

    def _record_output(self, text: str) -> None:
        """Record a tick's output; a channel run's signals are taken out and recorded with
        it, in order, in one commit."""
        if self._signals is None:
            self._publish(text)
        else:
            record_said(self._engine, self.job_id, self._signals.take(text))

    def _publish(self, text: str) -> None:
        if text:
            try:
                self._engine.handle(c.RecordJobOutput(job_id=self.job_id, text=text))
            except EngineError as ex:  # the job moved on (superseded, cancelled): drop the chunk
                log.debug("output of %s not recorded: %s", self.job_id, ex)

    def _last_words(self, io: RunIO) -> tuple[str, str]:
        """The output since the last tick, and the result: the job's whole output, the
        earlier runs' recorded output (a resumed run's) then this run's stdout. A channel
        run's signals are recorded here, in order, before its end; neither keeps them."""
        last_output = self._decoder.decode(io.take_new(), final=True)
        result = io.stdout().decode("utf-8", errors="replace")
        if self._signals is None:  # its answers (ADR 0054) are read here, before its finish
            answered, result = answers(result, self.job_id, self.run_id)
            record(self._engine, self.job_id, answered)
            return last_output, self._earlier + result
        said = self._signals.take(last_output, final=True)
        tail = said.pop() if said and isinstance(said[-1], str) else None
        record_said(self._engine, self.job_id, said)
        return (tail if isinstance(tail, str) else ""), self._earlier + without_signals(result)

    def _record_end(
        self,
        exit_code: int,
        last_output: str,
        result: str,
        stopped_because: str | None,
        stderr_tail: str,
    ) -> None:
        """Record how the run ended, then hand on the owed replies its commit made."""
        engine, job_id = self._engine, self.job_id
        try:
            gone = self._pause.end(exit_code, last_output, stopped_because)
            if gone is not None:
                self._hand_on(gone)
                return
            if stopped_because in ENDED:
                self._publish(last_output)
                if stopped_because == J.CANCELLING:
                    self._hand_on(engine.handle(c.ConfirmJobCancelled(job_id=job_id)))
                return
            if stopped_because == "timeout":
                timeout_s = self._settings.timeout_s
                result = f"{result}\n[foldline: run killed after {timeout_s:g} s timeout]".lstrip()
            outcome = "ok" if exit_code == 0 and stopped_because is None else "error"
            if outcome == "error" and not result.strip() and stderr_tail:
                result = stderr_tail
            patch = None
            if self.writer is not None:
                outcome, result, patch = self.writer.judge(outcome, result)
            # Only a run that ended well is judged: a failed one broke no contract of its own.
            verdict = None
            if self._schema is not None and outcome == "ok":
                verdict = contracts.judge(self._schema, result)
            finish = c.FinishJob(
                job_id=job_id,
                run_id=self.run_id,
                outcome=outcome,
                result=result[: 1 << 20],
                files=files_manifest(result, self._settings.workspace),
                exit_code=exit_code,
                warnings=warnings_of(result),
                patch=patch,
                contract_valid=None if verdict is None else verdict.valid,
                contract_errors=() if verdict is None else verdict.errors,
            )
            finished = self._finish_when_room(last_output, finish)
            if finished is None:
                return
        except EngineError as ex:  # first writer wins: the job ended another way meanwhile
            log.info("job %s ended elsewhere: %s", job_id, ex)
            if self._job_state() == "cancelling":
                self._hand_on(engine.handle(c.ConfirmJobCancelled(job_id=job_id)))
            elif self._job_state() == J.PAUSED:  # paused as it ended: its end is the pause's
                gone = self._pause.end(exit_code, "", stopped_because)
                if gone is not None:
                    self._hand_on(gone)
            return
        self._hand_on(finished)

    def _finish_when_room(self, last_output: str, finish: c.FinishJob) -> CommandResult | None:
        """``_finish``, tried again while the disk is full: the run's end is known and held
        here, and space comes back when an operator frees it, without a restart. Returns what
        the finish appended, or None if the server stops first: the job stays ``running``,
        cut off, for recovery, as at any stop."""
        said = False
        while True:
            try:
                return self._finish(last_output, finish)
            except StorageFull as ex:
                if not said:
                    log.warning("the end of %s waits for room in the log: %s", self.job_id, ex)
                    said = True
                if self._settings.stopping.wait(FULL_RETRY_S):
                    return None

    def _finish(self, last_output: str, finish: c.FinishJob) -> CommandResult:
        """The run's last output, then its finish, in one commit: one sync, and one wake-up of
        a sync caller, instead of two (ADR 0027). If the log refuses either, the two steps as
        they were: the output alone (dropped if the job moved on), then the finish, whose
        refusal is the caller's to handle. Returns what the finish appended."""
        if last_output:
            try:
                output = c.RecordJobOutput(job_id=self.job_id, text=last_output)
                return self._engine.handle_all([output, finish])[-1]
            except StorageFull:
                raise  # tried again whole (``_finish_when_room``): the output alone would repeat
            except EngineError:
                self._publish(last_output)
        return self._engine.handle(finish)

    def _hand_on(self, done: CommandResult) -> None:
        """Hand on each owed reply the commit ``done`` made: this job's own, or that of a job
        that waited settling for its subtree and ended with this one (ADR 0050)."""
        for reply in replies_in(self._engine, done):
            self._settings.on_reply(reply.job_id, reply.status, reply.result)

    def _release_if_ended(self) -> None:
        """A writer's worktree goes once its job is over (its patch, if any, is kept); a run
        cut off by a stop keeps it for the resumed run."""
        if self.writer is None or self._settings.stopping.is_set():
            return
        # A settling job's run is over too, its patch taken (ADR 0050).
        if self._job_state() in TERMINAL or self._job_state() == J.SETTLING:
            self.writer.release()

    def _job_state(self) -> str | None:
        return queries.job_state(self._engine.log.connection(), self.job_id)


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
