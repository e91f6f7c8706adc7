"""Who runs the notify hook of an owed reply (design.md §9, ADR 0050), and in which thread.

A run whose own end was the reply an ``/invocations`` caller was owed runs the hook in its
thread (``run``, the run's ``on_reply``); a commit made outside a run that ended the last job
below a settling one (an operator's cancel, a failed resume) hands its replies on
(``hand_on``), each hook in a thread of its own, since a hook may take minutes. Under a front
the hook is the front's to run (``front_handoff``). The hook is in-flight work on the busy
board while it runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from adapters.services import front_handoff, job_trace, notify
from adapters.services.busy import BusyBoard
from adapters.settings.config import ServerConfig
from engine.domain import ids
from engine.domain.engine import DomainEngine
from engine.engine import CommandResult
from projections import queries

# What a hook's span records (ADR 0059): its start, and its end or its loss.
NOTIFY_EVENTS = ("job.notify_started", "job.notify_finished", "job.notify_lost")


class OwedReplies:
    """The notify hook of every owed reply of one server."""

    def __init__(
        self, config: ServerConfig, engine: Callable[[], DomainEngine], busy: BusyBoard
    ) -> None:
        self.config = config
        self._engine = engine
        self.busy = busy

    def hand_on(self, done: CommandResult) -> None:
        """Hand on the owed replies a commit made outside a run, each hook in its own
        thread."""
        for reply in notify.replies_in(self._engine(), done):
            threading.Thread(
                target=self.run,
                args=(reply.job_id, reply.status, reply.result),
                name=f"notify-{reply.job_id}",
                daemon=True,
            ).start()

    def run(self, job_id: str, status: str, result: str) -> None:
        """Run the hook (or hand it to the front's) for a job whose end was an owed reply:
        the ``Run`` whose end made it, or ``hand_on``, calls this once.

        Raises:
            LookupError: the job is not in the log (a bug: its end was just recorded).
        """
        in_front = front_handoff.hook_in_front()  # under a front, the hook is the front's to run
        if not self.config.notify and not in_front:
            return
        engine = self._engine()
        session_id = queries.job_session(engine.log.connection(), job_id)
        if session_id is None:
            raise LookupError(f"no job {job_id}")
        self.busy.enter()
        with job_trace.job_span(
            engine.log,
            job_id,
            "notify",
            **{job_trace.SESSION: session_id, job_trace.OUTCOME: status},
        ) as span:
            since = engine.log.head() if span.is_on else 0
            try:
                self._run_hook(engine, in_front, job_id, session_id, status, result)
            finally:
                span.set(
                    job_trace.POSITIONS,
                    job_trace.positions_since(engine.log, ids.job(job_id), since, NOTIFY_EVENTS)
                    if span.is_on
                    else None,
                )

    def _run_hook(
        self,
        engine: DomainEngine,
        in_front: bool,
        job_id: str,
        session_id: str,
        status: str,
        result: str,
    ) -> None:
        try:
            if in_front:
                front_handoff.notify_front(
                    engine, job_id, session_id, status, result, self.config.notify_timeout_s
                )
                return
            assert self.config.notify is not None
            notify.run_hook(
                engine,
                self.config.notify,
                self.config.workspace,
                self.config.notify_timeout_s,
                job_id,
                session_id,
                status,
                result,
            )
        finally:
            self.busy.leave()
