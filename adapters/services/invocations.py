"""An AgentCore invocation (design.md §5.1, ADR 0038): into the session's running job, or a new
job (ADR 0048).

A session keeps the agent it was created with: a later invocation runs it whatever agent it
names (the job records the one it named in vain, ``agent_ignored``, and its body warns). With
``deliver`` (the default) a prompt on a busy session keeps the work there: it is sent into the
job the session owes when its run takes input (``Invocations._deliver``); otherwise the new job
supersedes that one and its run gets the superseded job's prompts (and those it covered)
before its own, so one completion answers them all (``engine.domain.plans``). ``deliver:
false`` starts the new job with its own prompt alone. The agent it names is checked either
way, before anything is read or recorded.

A prompt on a session whose job has a question pending (its run printed ``input_required``) is
that question's answer, whatever ``deliver`` says (``_answer``): the sync caller was answered
with the question and replies on the same session, as an A2A follow-up on an
``input-required`` task is its answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from adapters.services.dispatch import Accepted, Dispatcher, DispatchFailed, new_id
from adapters.system.prompts import join_prompts, read_prompt
from engine.domain import ids, plans, prompt_delivery, usecases
from engine.domain.engine import DomainEngine
from engine.domain.errors import SessionMoved

# How often an invocation is planned again when its write finds the session moved under it.
PLANS = 5


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
        deliver: bool = True,
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
            accepted = self._deliver(session_id, prompt, prompt_file, caller_id)
            if accepted is not None:
                return accepted
        return self.dispatch(prompt, prompt_file, session_id, agent, caller_id, fold=deliver)

    def _deliver(
        self, session_id: str, prompt: str, prompt_file: str, caller_id: str | None
    ) -> Accepted | None:
        """Deliver the prompt (or the text of ``prompt_file``) into the job the session owes
        as a message, if it is running and its run takes input (ADR 0038); else None, with
        nothing recorded. A known ``caller_id`` answers the job it went into.

        Raises:
            DispatchFailed: the prompt file could not be read (nothing recorded).
            EngineError: the rules refused the control (a text outside its limits).
        """
        command_id = ids.invocation_command(caller_id) if caller_id is not None else None
        try:
            raw = read_prompt(self._jobs.config.workspace, prompt, prompt_file, self._jobs.private)
        except OSError as ex:
            raise DispatchFailed(f"prompt file could not be read: {ex}") from ex
        text = raw.decode("utf-8", errors="replace")  # a run's prompt is bytes; a control, text
        started = prompt_delivery.deliver_prompt(self._engine(), session_id, text, command_id)
        if started is None or started.job_id is None:
            return None
        job_id, position, duplicate = started.job_id, started.position, started.duplicate
        return Accepted(job_id, session_id, caller_id, position, duplicate, started.control)

    def _answer(
        self, session_id: str, agent: str, prompt: str, prompt_file: str, caller_id: str | None
    ) -> Accepted | None:
        """Deliver the prompt (or the text of ``prompt_file``) as the answer to the oldest
        question the session's job has pending (``prompt_delivery.answer_prompt``), whatever
        ``deliver`` says; else None, with nothing read or recorded.

        Raises:
            DispatchFailed: the prompt file could not be read (nothing recorded).
            EngineError: the rules refused it (an unknown agent, an answer over its limit).
        """
        engine = self._engine()
        if not prompt_delivery.is_waiting_for_answer(engine, session_id):
            return None  # the common case costs one read, and no prompt file is read twice
        engine.settings.agent(agent)  # an unknown agent is refused either way
        jobs = self._jobs
        try:
            raw = read_prompt(jobs.config.workspace, prompt, prompt_file, jobs.private)
        except OSError as ex:
            raise DispatchFailed(f"prompt file could not be read: {ex}") from ex
        text = raw.decode("utf-8", errors="replace")
        command_id = ids.invocation_command(caller_id) if caller_id is not None else None
        started = prompt_delivery.answer_prompt(engine, session_id, text, command_id)
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

    def dispatch(
        self,
        prompt: str,
        prompt_file: str,
        session_id: str | None,
        agent: str,
        caller_id: str | None,
        *,
        fold: bool,
    ) -> Accepted:
        """Record a new job and start its run, or answer the job a known ``caller_id`` made.

        On an existing session the run runs the session's agent, whatever ``agent`` names;
        with ``fold`` it also gets the prompts of the owed job it supersedes, before its own
        (``engine.domain.plans``; joined as ``join_prompts`` says). A plan the write finds
        stale (``SessionMoved``) is made again, at most ``PLANS`` times.

        Raises:
            DispatchFailed: the run could not be started (nothing recorded).
            EngineError: the rules refused it (unknown agent, pointer conflict, admission,
                a session that kept moving, ...).
        """
        engine, jobs = self._engine(), self._jobs
        session_id = session_id or new_id("inv")
        command_id = ids.invocation_command(caller_id) if caller_id is not None else None
        engine.settings.agent(agent)  # an unknown agent is refused before any IO
        try:
            # Read before anything is recorded: a file gone now is a failed dispatch, not a
            # recorded job whose run can never start.
            own = read_prompt(jobs.config.workspace, prompt, prompt_file, jobs.private)
        except OSError as ex:
            raise DispatchFailed(f"prompt file could not be read: {ex}") from ex
        for attempt in range(PLANS):
            plan = plans.plan_invocation(engine, session_id, agent, fold)
            request = usecases.Invocation(
                session_id=session_id,
                agent=plan.agent,
                prompt=prompt,
                prompt_file=prompt_file,
                command_id=command_id,
                session_run_id=new_id("run"),
                agent_ignored=plan.agent_ignored,
                covers=plan.covers,
            )
            try:
                started = self._launch(request, own)
            except SessionMoved:
                if attempt == PLANS - 1:
                    raise
                continue
            assert started.job_id is not None  # an invocation always names its job
            return Accepted(
                started.job_id, session_id, caller_id, started.position, started.duplicate
            )
        raise AssertionError("unreachable: the last plan returns or raises")

    def _launch(self, request: usecases.Invocation, own: bytes) -> usecases.Started:
        """Launch one planned invocation: its run's stdin is the prompts of the jobs it
        covers, then its own (``own``, read already)."""
        try:
            covered = self._jobs.prompts_of(request.covers or ())
        except OSError as ex:
            raise DispatchFailed(f"a covered job's prompt could not be read: {ex}") from ex
        return self._jobs.launch(
            request.session_id,
            join_prompts([*covered, own]),
            request.agent,
            lambda job_ids: replace(request, job_id=job_ids[0]),
        )
