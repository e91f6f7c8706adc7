"""Starting jobs: spawn each run gated, record its job started, give the run a thread.

A run belongs to its owner (``adapters.services.run``) from its spawn on: in a thread of this
process, after the commit, the owner opens the gate and watches the run to its end (design.md
§7). Prompts are read by ``adapters.system.prompts``.

A run and its notify hook are in-flight work, counted on the server's busy board
(``adapters.services.busy``): what ``/ping`` reports as HealthyBusy, whichever worker answers,
without opening the log.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from adapters.services import forks, job_controls, job_trace, run_given, sandbox
from adapters.services.busy import BusyBoard
from adapters.services.job_controls import Controller
from adapters.services.owed_replies import OwedReplies
from adapters.services.run import Run, RunSettings
from adapters.services.writers import Worktrees
from adapters.settings.config import ServerConfig
from adapters.system import tracing
from adapters.system.gitwork.runner import GitFailed
from adapters.system.processes import spawn_gated
from adapters.system.prompts import join_prompts, read_prompt
from engine.domain import commands as c
from engine.domain import ids, usecases
from engine.domain.engine import DomainEngine
from projections import queries

log = logging.getLogger("foldline.dispatch")


def new_id(prefix: str) -> str:
    """``<prefix>_<time><hex>``: sortable by creation, unique without coordination."""
    return f"{prefix}_{time.time_ns() // 1_000_000:x}{secrets.token_hex(6)}"


@dataclass(frozen=True)
class Accepted:
    job_id: str
    session_id: str
    caller_id: str | None
    position: int
    duplicate: bool = False
    control: int = 0  # a delivery into the running job: its control (``deliver``)


@dataclass(frozen=True)
class Spawn:
    """One job a running job (or the operator) asks for on ``POST /v1/jobs``."""

    agent: str
    prompt: str
    write_scope: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launch:
    session_id: str
    stdin: bytes
    agent: str
    job_id: str | None = None  # an accepted, cut-off job: this launch resumes it
    env: Mapping[str, str] | None = None  # added to the run's environment (FOLDLINE_TASK_MESSAGES)
    write_scope: tuple[str, ...] = ()  # a writer: it runs in a worktree of its own
    worktree: tuple[Path, str] | None = None  # a resumed writer's worktree and base commit
    history: bool = True  # a root job: its run gets its session's history (ADR 0049)
    forked_from: str | None = None  # a fork's source: its runs start from the source's output
    fork_worktree: tuple[Path, str] | None = None  # a writer's fork: the source's worktree


def token_digest(token: str) -> str:
    """What is recorded of a run token: its sha256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


class DispatchFailed(Exception):
    """The job could not reach its runner; no job row was left (HTTP 500, retry may run)."""


Admit = Callable[[list[str]], usecases.Request]
"""The request that admits a launch's new jobs, given their ids (``launch_all``)."""


class Dispatcher:
    def __init__(
        self,
        config: ServerConfig,
        engine: Callable[[], DomainEngine],
        stopping: threading.Event,
        busy: BusyBoard,
    ) -> None:
        self.config = config
        self._engine = engine
        self.busy = busy  # the server's, shared by its workers
        self._runs: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self.winding_down = threading.Event()  # set: the server's stop asked its runs to end
        # Who runs execute as, and what they cannot see (None: as the server, a non-root one).
        self.sandbox = sandbox.for_server(config)
        # What a run may never have read to it: the log's directory (its token beside it).
        self.private = config.db.parent if config.db_url is None else config.state_dir
        self.worktrees = Worktrees.for_server(config, self.sandbox, self.private)
        # The notify hook of each owed reply, whichever commit made it (ADR 0050).
        self.replies = OwedReplies(config, engine, busy)
        # What every run shares; a run cut off by ``stopping`` records nothing (recovery's).
        self._run_settings = RunSettings(
            config.workspace,
            config.job_timeout_s,
            config.output_flush_s,
            stopping,
            on_reply=self.replies.run,
            winding_down=self.winding_down,
        )

    def owned(self) -> list[str]:
        """The job ids of the runs this process owns now (a copy: runs come and go)."""
        return list(self._runs.copy())

    def join(self, timeout_s: float) -> None:
        """Wait for this process's runs to stop (they stay recorded as running, for recovery)."""
        for thread in list(self._runs.values()):
            thread.join(timeout=timeout_s)

    def repeat(self, caller_id: str) -> str | None:
        """The job an invocation under ``caller_id`` made before, or delivered its prompt into,
        or None (the domain's rule, read before anything is spawned; the write decides again)."""
        started = usecases.recorded(self._engine(), ids.invocation_command(caller_id))
        return None if started is None else started.job_id

    def prompts_of(self, job_ids: tuple[str, ...]) -> list[bytes]:
        """The prompts the accepted jobs ``job_ids`` were given, in order, as their runs read
        them (a ``promptFile`` is read now).

        Raises:
            OSError: a prompt file could not be read.
        """
        log_ = self._engine().log
        prompts = []
        for job_id in job_ids:
            accepted: Any = log_.read_stream(ids.job(job_id))[0].event
            prompts.append(
                read_prompt(
                    self.config.workspace, accepted.prompt, accepted.prompt_file, self.private
                )
            )
        return prompts

    def spawn(
        self,
        session_id: str,
        items: list[Spawn],
        parent_job: str | None,
        token_digest: str | None,
    ) -> list[str]:
        """Admit ``items`` all-or-nothing as one batch below ``parent_job`` (None: top level,
        the operator's) and start their runs. Returns the new job ids, in order.

        Raises:
            DispatchFailed: a run could not be started (nothing recorded).
            EngineError: the rules refused one item (nothing recorded).
        """
        engine = self._engine()
        batch = new_id("batch")
        commands = []
        for item in items:
            policy = engine.settings.agent(item.agent)
            commands.append(
                c.AcceptJob(
                    job_id="",
                    session_id=session_id,
                    prompt=item.prompt,
                    agent=item.agent,
                    parent_job=parent_job,
                    batch=batch,
                    resource_group=policy.resource_group,
                    units=policy.units,
                    write_scope=tuple(item.write_scope),
                    owed=False,
                    caller_token_digest=token_digest,
                )
            )

        def admit(job_ids: list[str]) -> c.AcceptJobs:
            named = [
                msgspec.structs.replace(cmd, job_id=job_id)
                for cmd, job_id in zip(commands, job_ids, strict=True)
            ]
            return c.AcceptJobs(jobs=tuple(named))

        launches = [
            Launch(session_id, item.prompt.encode(), item.agent, write_scope=item.write_scope)
            for item in items
        ]
        if parent_job is not None:  # a worker's parent tells it what it needs: no history
            launches = [replace(launch, history=False) for launch in launches]
        job_ids, _ = self.launch_all(launches, admit)
        return job_ids

    def resume(
        self, job_id: str, extra_input: str = "", continued: Controller | None = None
    ) -> None:
        """Start a cut-off job again: a new run, ``FOLDLINE_RESUMED=1``, the same prompt
        (with ``extra_input`` appended, after a blank line, if given) and its earlier output
        (``FOLDLINE_EARLIER_OUTPUT``); ``continued``: the operator's or an ancestor's live
        run's continue asks for it, a control checked and recorded in the same write
        (``ControlJob`` with ``relaunch``, ADR 0057); None: recovery's resume.

        Raises:
            DispatchFailed: its prompt cannot be read or its runner cannot start.
            EngineError: the rules refused the new run (capacity taken, state moved on).
        """
        engine = self._engine()
        accepted: Any = engine.log.read_stream(f"job:{job_id}")[0].event
        job = queries.job(engine.log.connection(), job_id)
        worktree = None
        if job is not None and job.worktree:  # a writer keeps its worktree across a crash
            if not Path(job.worktree).is_dir():
                raise DispatchFailed(f"its worktree {job.worktree} is gone")
            worktree = (Path(job.worktree), job.base_commit or "")
        try:  # the prompts it covers (ADR 0048), then its own, as its first run got them
            stdin = join_prompts(self.prompts_of((*accepted.covers, job_id)))
        except OSError as ex:
            raise DispatchFailed(
                f"promptFile {accepted.prompt_file} could not be read: {ex.strerror or ex}"
            ) from ex
        if extra_input:
            stdin = stdin.rstrip(b"\n") + b"\n\n" + extra_input.encode()
        launch = Launch(
            accepted.session,
            stdin,
            accepted.agent,
            job_id=job_id,
            write_scope=tuple(accepted.write_scope),
            worktree=worktree,
            history=accepted.parent_job is None,
            forked_from=getattr(accepted, "forked_from", None),
        )
        self.launch_all([launch], lambda _: job_controls.relaunch_request(job_id, continued))

    def fork(self, source_id: str, extra_input: str, by: Controller) -> str:
        """Start the fork of ``source_id`` that ``by`` asks for (``forks.plan``, ADR 0057); its
        run is given the source's output so far. Returns the new job's id.

        Raises:
            DispatchFailed: the source's prompt cannot be read, or its run cannot start.
            EngineError: the rules refused (no such job, no grant, a stale revision, ended,
                capacity): nothing recorded.
        """
        try:
            fork = forks.plan(self._engine(), self.prompts_of, source_id, extra_input, by)
        except OSError as ex:
            raise DispatchFailed(f"the source's prompt could not be read: {ex}") from ex
        launch = Launch(
            fork.session_id,
            fork.stdin,
            fork.agent,
            write_scope=fork.write_scope,
            history=False,
            forked_from=source_id,
            fork_worktree=fork.worktree,
        )
        job_ids, _ = self.launch_all([launch], fork.admit)
        return job_ids[0]

    def launch(
        self,
        session_id: str,
        stdin: bytes,
        agent: str,
        admit: Admit,
        env: Mapping[str, str] | None = None,
    ) -> usecases.Started:
        """One new job (see ``launch_all``). Returns the domain's outcome."""
        _, started = self.launch_all([Launch(session_id, stdin, agent, env=env)], admit)
        return started

    def launch_all(
        self, launches: list[Launch], admit: Admit
    ) -> tuple[list[str], usecases.Started]:
        """Spawn one gated run per launch, let the domain decide ``admit(job_ids)`` and start
        them all in one transaction (``usecases.start``), then open the gates. A launch with a
        ``job_id`` (an accepted, cut-off job) is a resumption. Either every run starts or none
        is recorded; a repeated request starts none and answers what the first one made.

        Each run gets ``FOLDLINE_URL`` and a fresh ``FOLDLINE_RUN_TOKEN``; only the token's
        sha256 is recorded (``job.started``), so the log never holds a usable credential. Of
        the server's environment it gets the allowlist and what ``FOLDLINE_RUN_ENV`` names
        (``adapters.settings.run_env``), never over the values set here. Its files to read
        (its session's history, its job's earlier output) are ``adapters.services.run_given``'s.

        Raises:
            DispatchFailed: a run could not be started (nothing recorded).
            EngineError: the domain refused (nothing recorded, the processes are abandoned).
        """
        engine = self._engine()
        started: list[tuple[Launch, str, Run]] = []
        traces: dict[str, job_trace.RunTrace] = {}  # each run's span (ADR 0059), by run id
        made: list[str] = []  # the worktrees this launch made: gone again if it fails
        given = run_given.Given(engine.log, self.sandbox, self.config.workspace, self.private)
        try:
            for launch in launches:
                job_id, run_id = launch.job_id or new_id("job"), new_id("run")
                writer = self.worktrees.writer(
                    job_id, launch.write_scope, launch.worktree, made, launch.fork_worktree
                )
                cwd = self.config.workspace
                token = secrets.token_urlsafe(32)
                jail = self.sandbox
                trace = job_trace.begin_run(
                    engine.log,
                    job_id,
                    run_id,
                    launch.session_id,
                    launch.agent,
                    launch.job_id is not None,
                    jail.isolation if jail is not None else "none",
                )
                traces[run_id] = trace
                env = {
                    **trace.env,  # TRACEPARENT, TRACESTATE, BAGGAGE: the run's span
                    **(launch.env or {}),
                    "FOLDLINE_JOB_ID": job_id,
                    "FOLDLINE_SESSION_ID": launch.session_id,
                    "FOLDLINE_RUN_ID": run_id,
                    "FOLDLINE_RESUMED": "1" if launch.job_id else "0",
                    "FOLDLINE_URL": self.config.local_url,
                    "FOLDLINE_RUN_TOKEN": token,
                }
                if writer is not None:
                    cwd = writer.worktree
                    env.update(FOLDLINE_WORKTREE=str(cwd), FOLDLINE_BASE_COMMIT=writer.base)
                earlier = given.prepare(
                    env, job_id, run_id, launch.history, bool(launch.job_id), launch.forked_from
                )
                command = self.config.command_of(launch.agent)
                env.update(
                    {"FOLDLINE_INPUT": "lines"} if self.config.input_of(launch.agent) else {}
                )
                jail, wrap = self.sandbox, None
                if jail is not None:  # what the run may see and write (ADR 0064)
                    env.update(jail.run_env())
                    tree = writer.worktree if writer is not None else None
                    view = sandbox.run_view(self.config, launch.agent, tree, given.folder(run_id))
                    wrap = partial(jail.wrap_run, view=view)
                # The allowlist and FOLDLINE_RUN_ENV's names, under the run's own values.
                base = self.config.run_env.base(os.environ)
                process = spawn_gated(command, cwd, env, base, wrap=wrap)
                trace.span.set("process.pid", process.pid)
                run = Run(
                    engine,
                    self._run_settings,
                    job_id,
                    run_id,
                    launch.stdin,
                    process,
                    writer=writer,
                    input=self.config.input_of(launch.agent),
                    resumed=launch.job_id is not None,
                    earlier=earlier,
                    schema=self.config.agents.schemas.get(launch.agent),
                )
                started.append((launch, token_digest(token), run))
        except (OSError, GitFailed) as ex:
            self._abandon(started, made, traces)
            given.discard()
            raise DispatchFailed(f"runner could not start: {ex}") from ex

        job_ids = [run.job_id for *_, run in started]
        try:
            starts = [
                c.StartJob(
                    job_id=run.job_id,
                    run_id=run.run_id,
                    pid=run.pid,
                    start_token=run.process.token,
                    resumed=launch.job_id is not None,
                    token_digest=digest,
                    worktree=str(run.writer.worktree) if run.writer is not None else "",
                    base_commit=run.writer.base if run.writer is not None else "",
                    input=self.config.input_of(launch.agent),
                    trace=traces[run.run_id].context,
                )
                for launch, digest, run in started
            ]
            outcome = usecases.start(engine, admit(job_ids), starts)
        except BaseException:
            self._abandon(started, made, traces)
            given.discard()
            raise
        if outcome.duplicate:  # nothing was recorded: these runs are not wanted
            self._abandon(started, made, traces)
            given.discard()
            return job_ids, outcome
        for launch, _, run in started:
            files = given.settle(run.run_id, launch.session_id)
            trace = traces[run.run_id]
            trace.started()
            thread = threading.Thread(
                target=self._run,
                args=(run, files, trace),
                name=f"run-{run.job_id}",
                daemon=True,
            )
            with self._lock:
                self._runs[run.job_id] = thread
            self.busy.enter()
            thread.start()
        return job_ids, outcome

    def _abandon(
        self,
        started: list[tuple[Launch, str, Run]],
        made: list[str],
        traces: Mapping[str, job_trace.RunTrace],
    ) -> None:
        """A launch that failed: its runs never start, and the worktrees it made go."""
        for trace in traces.values():
            trace.abandoned()
        for *_, run in started:
            run.abandon()
        for job_id in made:
            self.worktrees.drop(job_id)

    def _run(self, run: Run, files: run_given.RunFiles, trace: job_trace.RunTrace) -> None:
        """A run's thread: the run to its end (``Run.to_end``), in-flight work meanwhile; its
        span is current meanwhile, and ended with what the log recorded (ADR 0059)."""
        try:
            with tracing.activated(trace.span):
                run.to_end()
            job_trace.end_run(self._engine().log, run.job_id, run.run_id, trace)
        finally:
            files.remove()  # what it was given to read goes with it
            with self._lock:
                self._runs.pop(run.job_id, None)
            self.busy.leave()
