"""An AgentCore invocation (design.md §5.1, ADR 0038): into the session's running job, or a new
job.

``deliver: true`` sends the prompt into the job the session owes when its run takes input
(``Dispatcher.deliver``) instead of starting a new job; when it does not (or without
``deliver``), the invocation starts a new job (``Dispatcher.dispatch``). The agent it names is
checked either way, before anything is read or recorded.
"""

from __future__ import annotations

from collections.abc import Callable

from adapters.services.dispatch import Accepted, Dispatcher
from engine.domain.engine import DomainEngine


class Invocations:
    """Invocations over this process's engine, started through the dispatcher."""

    def __init__(self, engine: Callable[[], DomainEngine], jobs: Dispatcher) -> None:
        self._engine = engine
        self._jobs = jobs

    def invoke(
        self,
        prompt: str,
        prompt_file: str,
        session_id: str | None,
        agent: str,
        caller_id: str | None,
        *,
        deliver: bool = False,
    ) -> Accepted:
        """Deliver the prompt into the session's running job (``deliver``), else record a new
        job and start its run; a known ``caller_id`` answers what it made before.

        Raises:
            DispatchFailed: the prompt file could not be read, or the run could not start.
            EngineError: the rules refused it (an unknown agent either way, admission, ...).
        """
        if deliver and session_id is not None:
            self._engine().settings.agent(agent)  # an unknown agent is refused either way
            accepted = self._jobs.deliver(session_id, prompt, prompt_file, caller_id)
            if accepted is not None:
                return accepted
        return self._jobs.dispatch(prompt, prompt_file, session_id, agent, caller_id)
