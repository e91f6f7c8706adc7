"""An invocation's prompt into the job its session owes (ADR 0038, design.md §5.1): a message
into a run that takes input (``deliver_prompt``), or the answer to its pending question
(``answer_prompt``), each one control recorded in one write, or nothing.

The idempotency key of such a prompt is the command id of the control it recorded, so a repeat
answers the job it went into (``usecases.recorded``) and appends nothing.
"""

from __future__ import annotations

import json

from engine.domain.channel import SendControl
from engine.domain.engine import DomainEngine
from engine.domain.rules.channel import owed_question, takes_input
from engine.domain.usecases import Started, repeat_of
from engine.log import Transaction


def deliver_prompt(
    engine: DomainEngine, session_id: str, prompt: str, command_id: str | None
) -> Started | None:
    """Deliver an invocation's prompt into the job ``session_id`` owes, as a message, if that
    job is running and its run takes input; else None, and nothing is recorded (the caller
    starts a new job as usual). A repeat of ``command_id`` appends nothing.

    Raises:
        EngineError: the rules refused the control (a text outside its limits).
    """

    def work(tx: Transaction) -> Started | None:
        view = engine.view_of(tx.cursor)
        replay = repeat_of(tx, view, command_id)
        if replay is not None:
            return replay
        session = view.session(session_id)
        owes = session.owes if session is not None else None
        job = view.job(owes.ref) if owes is not None and owes.kind == "job" else None
        if job is None or not takes_input(job):
            return None
        control = SendControl(
            job_id=job.job_id, action="message", text=prompt, by="invocation", command_id=command_id
        )
        done = engine.handle_in(tx, control)
        return Started(job.job_id, job.task_id, position=tx.position, control=done.last_position)

    return engine.log.write(work)


def is_waiting_for_answer(engine: DomainEngine, session_id: str) -> bool:
    """Whether the job ``session_id`` owes has a question pending, as the committed log says
    (a hint: ``answer_prompt`` decides again inside its write)."""
    return owed_question(engine.view_of(engine.log.connection()), session_id) is not None


def answer_prompt(
    engine: DomainEngine, session_id: str, prompt: str, command_id: str | None
) -> Started | None:
    """Deliver an invocation's prompt as the answer to the oldest pending question of the job
    ``session_id`` owes (``respond`` with ``{"text": prompt}``, as an A2A follow-up answers
    one); else None, and nothing is recorded. A repeat of ``command_id`` appends nothing.

    Raises:
        EngineError: the rules refused the control (a response of more than 64 KiB of JSON).
    """

    def work(tx: Transaction) -> Started | None:
        view = engine.view_of(tx.cursor)
        replay = repeat_of(tx, view, command_id)
        if replay is not None:
            return replay
        asked = owed_question(view, session_id)
        if asked is None:
            return None
        job, request = asked
        answer = json.dumps({"text": prompt}, ensure_ascii=False)
        control = SendControl(
            job_id=job.job_id,
            action="respond",
            request=request,
            response=answer,
            by="invocation",
            command_id=command_id,
        )
        done = engine.handle_in(tx, control)
        return Started(job.job_id, job.task_id, position=tx.position, control=done.last_position)

    return engine.log.write(work)
