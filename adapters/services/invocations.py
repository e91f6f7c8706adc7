"""An AgentCore invocation (design.md §5.1, ADR 0038): into the session's running job, or a new
job.

``deliver: true`` sends the prompt into the job the session owes when its run takes input
(``Dispatcher.deliver``) instead of starting a new job; when it does not (or without
``deliver``), the invocation starts a new job (``Dispatcher.dispatch``). The agent it names is
checked either way, before anything is read or recorded.

A prompt on a session whose job has a question pending (its run printed ``input_required``) is
that question's answer, whatever ``deliver`` says (``_answer``): the sync caller was answered
with the question and replies on the same session, as an A2A follow-up on an
``input-required`` task is its answer.
"""

from __future__ import annotations

from collections.abc import Callable

from adapters.services.dispatch import Accepted, Dispatcher, DispatchFailed
from adapters.system.prompts import read_prompt
from engine.domain import ids, usecases
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
        if session_id is not None:  # a question pending: this prompt is its answer
            answered = self._answer(session_id, agent, prompt, prompt_file, caller_id)
            if answered is not None:
                return answered
        if deliver and session_id is not None:
            self._engine().settings.agent(agent)  # an unknown agent is refused either way
            accepted = self._jobs.deliver(session_id, prompt, prompt_file, caller_id)
            if accepted is not None:
                return accepted
        return self._jobs.dispatch(prompt, prompt_file, session_id, agent, caller_id)

    def _answer(
        self, session_id: str, agent: str, prompt: str, prompt_file: str, caller_id: str | None
    ) -> Accepted | None:
        """Deliver the prompt (or the text of ``prompt_file``) as the answer to the oldest
        question the session's job has pending (``usecases.answer_prompt``), whatever
        ``deliver`` says; else None, with nothing read or recorded.

        Raises:
            DispatchFailed: the prompt file could not be read (nothing recorded).
            EngineError: the rules refused it (an unknown agent, an answer over its limit).
        """
        engine = self._engine()
        if not usecases.is_waiting_for_answer(engine, session_id):
            return None  # the common case costs one read, and no prompt file is read twice
        engine.settings.agent(agent)  # an unknown agent is refused either way
        jobs = self._jobs
        try:
            raw = read_prompt(jobs.config.workspace, prompt, prompt_file, jobs.private)
        except OSError as ex:
            raise DispatchFailed(f"prompt file could not be read: {ex}") from ex
        text = raw.decode("utf-8", errors="replace")
        command_id = ids.invocation_command(caller_id) if caller_id is not None else None
        started = usecases.answer_prompt(engine, session_id, text, command_id)
        if started is None or started.job_id is None:
            return None  # answered meanwhile, or the job ended: the prompt goes on as usual
        return Accepted(
            started.job_id,
            session_id,
            caller_id,
            started.position,
            started.duplicate,
            started.control,
        )
