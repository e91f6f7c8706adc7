"""An invocation's prompt answers the question the session's job asked (issue 42, goal 6), on a
real log file and on PostgreSQL: the oldest pending question gets a ``respond`` control carrying
``{"text": prompt}``; without one nothing is recorded and the caller goes on as usual; a repeat
of the caller's id answers the job and records nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.domain import channel as ch
from engine.domain import commands as c
from engine.domain import prompt_delivery, usecases
from engine.domain.engine import DomainEngine
from projections import open_engine, queries
from tests.support.backends import log_target
from tests.unit.test_usecases import invocation


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DomainEngine]:
    opened = open_engine(log_target(request.param, tmp_path))
    yield opened
    opened.log.close()


def owed(engine: DomainEngine, input: ch.Input = "lines") -> None:
    """Session s1 owes job j1, running (its run taking input or not)."""
    usecases.start(engine, invocation("j1"), [c.StartJob(job_id="j1", run_id="r1", input=input)])


def asks(engine: DomainEngine, request: str, question: str) -> None:
    signal = ch.RecordRunSignal(
        job_id="j1", run_id="r1", signal="input_required", request=request, question=question
    )
    engine.handle(signal)


def answers(engine: DomainEngine) -> list[dict[str, Any]]:
    return [
        {
            "request": e.event.request,  # type: ignore[attr-defined]
            "response": json.loads(e.event.response),  # type: ignore[attr-defined]
            "by": e.event.by,  # type: ignore[attr-defined]
            "id": e.command_id,
        }
        for e in engine.log.read_stream("job:j1")
        if e.event_type == "job.control"
    ]


def test_usecases_answer_prompt_answers_the_oldest_pending_question(
    engine: DomainEngine,
) -> None:
    owed(engine)
    asks(engine, "colour", "Which colour?")
    asks(engine, "size", "Which size?")
    assert prompt_delivery.is_waiting_for_answer(engine, "s1")

    started = prompt_delivery.answer_prompt(engine, "s1", "blue", "inv:k2")

    assert started is not None and (started.job_id, started.duplicate) == ("j1", False)
    assert started.control == engine.log.head()
    assert answers(engine) == [
        {"request": "colour", "response": {"text": "blue"}, "by": "invocation", "id": "inv:k2"}
    ]
    rows = queries.requests(engine.log.connection(), "j1")
    assert [(r.request, r.state, r.answer) for r in rows] == [
        ("colour", "answered", started.control),
        ("size", "pending", None),
    ]
    # The next prompt answers the next question; then nothing is pending.
    prompt_delivery.answer_prompt(engine, "s1", "large", None)
    assert [a["request"] for a in answers(engine)] == ["colour", "size"]
    assert not prompt_delivery.is_waiting_for_answer(engine, "s1")


def test_usecases_answer_prompt_repeat_answers_the_job_and_records_nothing(
    engine: DomainEngine,
) -> None:
    owed(engine)
    asks(engine, "q1", "Which?")
    prompt_delivery.answer_prompt(engine, "s1", "that one", "inv:k2")
    asks(engine, "q2", "And then?")  # a question pending again: the repeat still answers none
    head = engine.log.head()

    again = prompt_delivery.answer_prompt(engine, "s1", "that one", "inv:k2")

    assert again == usecases.Started("j1", None, duplicate=True)
    assert usecases.recorded(engine, "inv:k2") == again
    assert engine.log.head() == head


def test_usecases_answer_prompt_without_a_pending_question_records_nothing(
    engine: DomainEngine,
) -> None:
    assert prompt_delivery.answer_prompt(engine, "s1", "hello", None) is None  # no session
    assert not prompt_delivery.is_waiting_for_answer(engine, "s1")
    owed(engine)
    head = engine.log.head()
    assert prompt_delivery.answer_prompt(engine, "s1", "hello", "inv:k2") is None  # nothing asked
    assert not prompt_delivery.is_waiting_for_answer(engine, "s1")
    assert engine.log.head() == head
    assert usecases.recorded(engine, "inv:k2") is None  # the caller's id stays free


def test_usecases_answer_prompt_ignores_a_question_of_a_job_that_ended(
    engine: DomainEngine,
) -> None:
    owed(engine)
    asks(engine, "q1", "Which?")
    engine.handle(c.FinishJob(job_id="j1", run_id="r1", outcome="ok", result="gave up"))
    head = engine.log.head()
    assert not prompt_delivery.is_waiting_for_answer(engine, "s1")
    assert prompt_delivery.answer_prompt(engine, "s1", "that one", None) is None
    assert engine.log.head() == head
