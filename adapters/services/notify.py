"""The notify hook (design.md §9): once per owed ``/invocations`` reply, never again.

It runs for a job that ended ``ok`` or ``error`` as the reply an ``/invocations`` caller was
owed: the commit that ended it settled its session's reply pointer (``pointer.owed_replies``,
``replies_in``). That commit is its run's finish, or, for a job that waited ``settling`` for
its subtree (the quiet gate, ADR 0050), the one that ended the last job below it: whoever made
that commit hands the reply on, once. Never for a
worker a run or the operator spawned (``/v1/jobs``), the job of an A2A message (A2A has push),
or a job superseded or cancelled; a job its session stopped owing was superseded, so the newer
prompt's job is the one that notifies.

``FOLDLINE_NOTIFY`` runs as ``sh -c`` in its own process group with the result on stdin; the
group is killed at the cap. Unlike a run, it gets the server's whole environment (where a
deployer keeps the channel secrets the hook posts with, as in the source system) plus the ids;
runs keep the allowlist (``adapters.system.processes.ENV_ALLOWLIST``) and the names of
``FOLDLINE_RUN_ENV``, which refuses at boot whatever could reach those secrets
(``adapters.settings.run_env``). It is spawned gated
(``adapters.system.processes``): its start (pid) is recorded before it can do anything, and its end
(exit code, duration, output tails) after, so a start without an end after a crash is visible
as a lost notification and is never re-run.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from adapters.system.processes import kill_group, spawn_gated
from engine.domain import commands as c
from engine.domain import ids
from engine.domain.engine import DomainEngine
from engine.domain.rules.pointer import owed_replies
from engine.engine import CommandResult
from engine.errors import EngineError
from projections import queries

log = logging.getLogger("foldline.notify")
TAIL = 1000


@dataclass(frozen=True)
class Reply:
    """An owed reply to hand on: the job, ``ok`` or ``error``, and its result."""

    job_id: str
    status: str
    result: str


def replies_in(engine: DomainEngine, done: CommandResult) -> list[Reply]:
    """The owed replies the commit that recorded ``done`` made, read back from its events (a
    handful) and the jobs' rows. Only a commit that touched a session can have settled one."""
    session_stream = ids.session("")
    if not done.appended or not any(s.startswith(session_stream) for s in done.streams):
        return []
    count = done.last_position - done.first_position + 1
    events = engine.log.read_all(after_position=done.first_position - 1, limit=count)
    conn = engine.log.connection()
    found = []
    for job_id in owed_replies(events):
        row = queries.job(conn, job_id)
        if row is not None:
            found.append(Reply(job_id, row.state, row.result or ""))
    return found


def run_hook(
    engine: DomainEngine,
    command: str,
    workspace: Path,
    timeout_s: float,
    job_id: str,
    session_id: str,
    status: str,
    result: str,
) -> None:
    env = {
        "FOLDLINE_SESSION_ID": session_id,
        "FOLDLINE_JOB_ID": job_id,
        "FOLDLINE_RUN_STATUS": status,
        "FOLDLINE_WORKSPACE": str(workspace),
    }
    started = time.monotonic()
    try:
        gated = spawn_gated(command, workspace, env, base=os.environ)
    except OSError as ex:
        log.error("notify hook for %s could not start: %s", job_id, ex)
        return
    process = gated.process
    try:
        engine.handle(c.RecordNotifyStarted(job_id=job_id, pid=process.pid))
    except EngineError as ex:  # at most once: no record, no run
        log.error("notify hook for %s not recorded, not run: %s", job_id, ex)
        gated.abandon()
        return
    try:
        out, err = process.communicate(gated.gated_input(result.encode()), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(process.pid)
        out, err = process.communicate()
    kill_group(process.pid)
    ms = int((time.monotonic() - started) * 1000)
    try:
        engine.handle(
            c.RecordNotifyFinished(
                job_id=job_id,
                exit_code=process.returncode,
                ms=ms,
                stdout_tail=out[-TAIL:].decode("utf-8", "replace"),
                stderr_tail=err[-TAIL:].decode("utf-8", "replace"),
            )
        )
    except EngineError as ex:
        log.error("notify hook end for %s not recorded: %s", job_id, ex)
