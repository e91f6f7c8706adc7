"""Work delivered into a run that takes input (engine.domain.usecases, ADR 0038): an A2A
follow-up and an invocation's prompt become controls of the running job, a repeat answers that
job and records nothing, and a run that takes no input gets nothing (the caller starts a run)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from engine.domain import channel as ch
from engine.domain import commands as c
from engine.domain import prompt_delivery, usecases
from engine.domain.engine import DomainEngine
from engine.domain.errors import NoChannel, TaskMoved
from projections import open_engine
from tests.unit.test_usecases import invocation, message, types


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[DomainEngine]:
    engine = open_engine(tmp_path / "deliver.db")
    yield engine
    engine.log.close()


def working(engine: DomainEngine, input: ch.Input = "lines") -> None:
    """Task t1 of session s1, its job j1 running (taking input or not)."""
    usecases.start(engine, message("j1"), [c.StartJob(job_id="j1", run_id="r1", input=input)])


def planned(engine: DomainEngine, **kw: object) -> usecases.TaskMessage:
    follow = message("", **{"message_id": "m2", "task_named": "t1", "text": "more", **kw})
    route = usecases.route(engine, follow)
    assert route.task is not None
    return replace(follow, planned_task="t1", planned_version=route.task.version)


def controls(engine: DomainEngine) -> list[dict[str, object]]:
    return [
        {"action": e.event.action, "text": e.event.text, "by": e.event.by, "id": e.command_id}  # type: ignore[attr-defined]
        for e in engine.log.read_stream("job:j1")
        if e.event_type == "job.control"
    ]


def test_usecases_deliver_a_follow_up_becomes_a_message_of_the_running_job(
    engine: DomainEngine,
) -> None:
    working(engine)
    follow = planned(engine)
    assert usecases.route(engine, follow).listening is not None
    head = engine.log.head()
    started = usecases.deliver(engine, follow)
    assert (started.job_id, started.task_id, started.duplicate) == ("j1", "t1", False)
    assert started.control == started.position == engine.log.head()
    assert types(engine)[-2:] == [("task:t1", "task.message_added"), ("job:j1", "job.control")]
    assert controls(engine) == [
        {"action": "message", "text": "more", "by": "a2a:t1", "id": "a2a:m2"}
    ]
    assert engine.log.head() == head + 2


def test_usecases_deliver_a_repeat_answers_the_job_and_records_nothing(
    engine: DomainEngine,
) -> None:
    working(engine)
    follow = planned(engine)
    usecases.deliver(engine, follow)
    head = engine.log.head()
    assert usecases.route(engine, follow).replay == usecases.Started("j1", "t1", duplicate=True)
    assert usecases.deliver(engine, follow) == usecases.Started("j1", "t1", duplicate=True)
    assert engine.log.head() == head


def test_usecases_deliver_answers_the_runs_pending_question(engine: DomainEngine) -> None:
    working(engine)
    engine.handle(
        ch.RecordRunSignal(
            job_id="j1", run_id="r1", signal="input_required", request="q1", question="Colour?"
        )
    )
    usecases.deliver(engine, planned(engine, text="blue"))
    (answer,) = [e.event for e in engine.log.read_stream("job:j1") if e.event_type == "job.control"]
    assert answer.action == "respond" and answer.request == "q1"  # type: ignore[attr-defined]
    assert json.loads(answer.response) == {"text": "blue"}  # type: ignore[attr-defined]


def test_usecases_deliver_to_a_run_without_input_records_nothing(engine: DomainEngine) -> None:
    working(engine, input="")
    follow = planned(engine)
    assert usecases.route(engine, follow).listening is None
    head = engine.log.head()
    with pytest.raises(NoChannel):
        usecases.deliver(engine, follow)
    assert engine.log.head() == head


def test_usecases_deliver_to_a_task_moved_since_the_plan_is_refused(engine: DomainEngine) -> None:
    working(engine)
    stale = planned(engine)
    engine.handle(c.UpdateTaskStatus(task_id="t1", text="busy"))
    with pytest.raises(TaskMoved):
        usecases.deliver(engine, stale)


def test_usecases_deliver_prompt_into_the_owed_job_when_it_takes_input(
    engine: DomainEngine,
) -> None:
    start = c.StartJob(job_id="j1", run_id="r1", input="lines")
    usecases.start(engine, invocation("j1"), [start])
    started = prompt_delivery.deliver_prompt(engine, "s1", "more", "inv:k2")
    assert started is not None and (started.job_id, started.duplicate) == ("j1", False)
    assert started.control == engine.log.head()
    assert controls(engine) == [
        {"action": "message", "text": "more", "by": "invocation", "id": "inv:k2"}
    ]
    head = engine.log.head()
    again = prompt_delivery.deliver_prompt(engine, "s1", "more", "inv:k2")
    assert again == usecases.Started("j1", None, duplicate=True)
    assert usecases.recorded(engine, "inv:k2") == again
    assert engine.log.head() == head


def test_usecases_deliver_prompt_finds_nothing_to_deliver_into(engine: DomainEngine) -> None:
    assert prompt_delivery.deliver_prompt(engine, "s1", "more", None) is None  # no session
    usecases.start(engine, invocation("j1"), [c.StartJob(job_id="j1", run_id="r1")])
    head = engine.log.head()
    assert prompt_delivery.deliver_prompt(engine, "s1", "more", None) is None  # no input
    assert engine.log.head() == head
