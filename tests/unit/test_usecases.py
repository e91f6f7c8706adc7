"""Starting work for a caller (engine.domain.usecases, ADR 0033): an invocation and an A2A
message decided by the domain in one write, a repeat answered once, and where a message may
not go refused with the domain's own errors, one behaviour per test on a real log file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from engine.domain import commands as c
from engine.domain import usecases
from engine.domain.engine import DomainEngine
from engine.domain.errors import SessionNotFound, TaskEnded, TaskMoved, TaskNotFound
from projections import open_engine


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[DomainEngine]:
    engine = open_engine(tmp_path / "usecases.db")
    yield engine
    engine.log.close()


def invocation(job_id: str, key: str | None = "k1", session_id: str = "s1") -> usecases.Invocation:
    return usecases.Invocation(
        session_id=session_id,
        agent="",
        prompt="hi",
        prompt_file="",
        command_id=None if key is None else f"inv:{key}",
        session_run_id="run-s",
        job_id=job_id,
    )


def message(job_id: str, **kw: object) -> usecases.TaskMessage:
    defaults: dict[str, object] = {
        "session_id": "s1",
        "session_named": False,
        "task_named": None,
        "message_id": "m1",
        "text": "hello",
        "agent": "",
        "new_task_id": "t1",
        "session_run_id": "run-s",
        "job_id": job_id,
    }
    return usecases.TaskMessage(**{**defaults, **kw})  # type: ignore[arg-type]


def types(engine: DomainEngine) -> list[tuple[str, str]]:
    return [(e.stream_id, e.event_type) for e in engine.log.read_all()]


def test_usecases_an_invocation_creates_its_session_then_accepts_and_starts_its_job(
    engine: DomainEngine,
) -> None:
    started = usecases.start(engine, invocation("j1"), [c.StartJob(job_id="j1", run_id="r1")])
    assert (started.job_id, started.duplicate) == ("j1", False)
    assert started.position == engine.log.head()
    assert types(engine) == [
        ("session:s1", "session.created"),
        ("session:s1", "session.started"),
        ("session:s1", "session.owes"),
        ("job:j1", "job.accepted"),
        ("job:j1", "job.started"),
    ]


def test_usecases_a_repeated_key_appends_nothing_and_answers_the_first_job(
    engine: DomainEngine,
) -> None:
    usecases.start(engine, invocation("j1"), [c.StartJob(job_id="j1", run_id="r1")])
    head = engine.log.head()
    again = usecases.start(engine, invocation("j2"), [c.StartJob(job_id="j2", run_id="r2")])
    assert (again.job_id, again.duplicate, again.position) == ("j1", True, 0)
    assert engine.log.head() == head


def test_usecases_a_message_opens_a_task_then_folds_a_follow_up(engine: DomainEngine) -> None:
    first = message("j1")
    assert usecases.route(engine, first) == usecases.Route(None, None)
    assert usecases.start(engine, first, []).task_id == "t1"
    follow = message("j2", message_id="m2", task_named="t1")
    route = usecases.route(engine, follow)
    assert route.task is not None and route.task.task_id == "t1"
    planned = replace(follow, planned_task="t1", planned_version=route.task.version)
    assert usecases.start(engine, planned, []).task_id == "t1"
    assert usecases.route(engine, follow).replay == usecases.Started("j2", "t1", duplicate=True)


def test_usecases_a_task_moved_since_the_plan_is_refused(engine: DomainEngine) -> None:
    usecases.start(engine, message("j1"), [])
    stale = message("j2", message_id="m2", task_named="t1", planned_task="t1")
    with pytest.raises(TaskMoved):
        usecases.start(engine, stale, [])
    with pytest.raises(TaskMoved):  # planned as a new task, but the session owes t1 now
        usecases.start(engine, message("j3", message_id="m3"), [])


def test_usecases_where_a_message_may_not_go_is_refused(engine: DomainEngine) -> None:
    with pytest.raises(SessionNotFound):
        usecases.route(engine, message("j1", session_named=True))
    usecases.start(engine, message("j1"), [])
    with pytest.raises(TaskNotFound):
        usecases.route(engine, message("j2", message_id="m2", task_named="nope"))
    engine.handle(c.CompleteTask(task_id="t1"))
    with pytest.raises(TaskEnded):
        usecases.route(engine, message("j2", message_id="m2", task_named="t1"))
