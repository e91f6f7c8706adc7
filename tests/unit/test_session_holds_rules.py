"""What a session holds (ADR 0048), through the command API on a real log file and on
PostgreSQL: its root jobs run the agent it was created with, and a new owed job that folds
covers exactly the owed job it supersedes (and what that one covered), checked in the write,
so a plan made before the run was spawned cannot fix another agent or lose a prompt."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from engine.domain import commands as c
from engine.domain import plans, usecases
from engine.domain.agents import AgentPolicy
from engine.domain.engine import DomainEngine
from engine.domain.errors import SessionMoved
from engine.domain.rules import Settings
from engine.errors import InvalidArgument
from projections import open_engine, queries
from tests.support.backends import log_target
from tests.unit.test_rules import refused


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DomainEngine]:
    agents = {name: AgentPolicy(name=name) for name in ("a", "b")}
    opened = open_engine(log_target(request.param, tmp_path), Settings(agents=agents))
    yield opened
    opened.log.close()


def invocation(job_id: str, agent: str = "", **kw: object) -> usecases.Invocation:
    return usecases.Invocation(
        session_id="s1",
        agent=agent,
        prompt=f"prompt of {job_id}",
        prompt_file="",
        command_id=None,
        session_run_id="run-s",
        job_id=job_id,
        **kw,  # type: ignore[arg-type]
    )


def invoke(engine: DomainEngine, request: usecases.Invocation) -> None:
    starts = [c.StartJob(job_id=request.job_id, run_id=f"run-{request.job_id}")]
    usecases.start(engine, request, starts)


def job(engine: DomainEngine, job_id: str) -> queries.JobRow:
    row = queries.job(engine.log.connection(), job_id)
    assert row is not None, job_id
    return row


def test_session_keeps_the_agent_its_first_root_job_named(engine: DomainEngine) -> None:
    invoke(engine, invocation("j1", agent="a"))
    plan = plans.plan_invocation(engine, "s1", "b", fold=False)
    named_none = plans.plan_invocation(engine, "s1", "", fold=False)
    invoke(engine, invocation("j2", agent=plan.agent, agent_ignored=plan.agent_ignored))

    assert (plan.agent, plan.agent_ignored) == ("a", "b")
    assert (named_none.agent, named_none.agent_ignored) == ("a", "")
    assert job(engine, "j2").agent == "a" and job(engine, "j2").agent_ignored == "b"
    assert job(engine, "j1").agent_ignored is None
    assert queries.session(engine.log.connection(), "s1").agent == "a"  # type: ignore[union-attr]


def test_session_root_job_of_another_agent_is_refused_in_the_write(
    engine: DomainEngine,
) -> None:
    # Two first calls raced: both planned a new session; the second one's write finds it made
    # with the first one's agent, and records nothing (its caller plans again).
    invoke(engine, invocation("j1", agent="a"))
    refused(engine, c.AcceptJob(job_id="j2", session_id="s1", agent="b", root=True), SessionMoved)
    head = engine.log.head()
    with pytest.raises(SessionMoved, match="runs agent a, not agent b"):
        invoke(engine, invocation("j2", agent="b"))
    assert engine.log.head() == head


def test_session_worker_jobs_name_their_own_agents(engine: DomainEngine) -> None:
    invoke(engine, invocation("j1", agent="a"))
    engine.handle(c.AcceptJob(job_id="w1", session_id="s1", agent="b", owed=False))
    assert job(engine, "w1").agent == "b"


def test_session_a2a_context_keeps_the_agent_of_its_first_task(engine: DomainEngine) -> None:
    message = usecases.TaskMessage(
        session_id="ctx",
        session_named=False,
        task_named=None,
        message_id="m1",
        text="hello",
        agent="a",
        new_task_id="t1",
        session_run_id="run-s",
        job_id="j1",
    )
    usecases.start(engine, message, [])
    engine.handle(c.CompleteTask(task_id="t1", result="hi"))
    later = replace(message, message_id="m2", new_task_id="t2", job_id="j2", agent="b")
    with pytest.raises(SessionMoved):
        usecases.start(engine, later, [])
    usecases.start(engine, replace(later, agent="a", agent_ignored="b"), [])

    assert queries.session(engine.log.connection(), "ctx").agent == "a"  # type: ignore[union-attr]
    assert plans.session_agent(engine, "ctx") == "a" and plans.session_agent(engine, "x") is None
    assert job(engine, "j2").agent == "a" and job(engine, "j2").agent_ignored == "b"


def test_session_busy_prompt_covers_the_superseded_job_transitively(
    engine: DomainEngine,
) -> None:
    invoke(engine, invocation("j1", covers=()))
    plan2 = plans.plan_invocation(engine, "s1", "", fold=True)
    invoke(engine, invocation("j2", covers=plan2.covers))
    plan3 = plans.plan_invocation(engine, "s1", "", fold=True)
    invoke(engine, invocation("j3", covers=plan3.covers))

    assert plan2.covers == ("j1",) and plan3.covers == ("j1", "j2")
    assert job(engine, "j1").state == "superseded" and job(engine, "j1").superseded_by == "j2"
    assert job(engine, "j2").superseded_by == "j3"
    assert job(engine, "j3").covers == ("j1", "j2") and job(engine, "j3").state == "running"
    accepted = engine.log.read_stream("job:j3")[0].event
    assert accepted.covers == ("j1", "j2")  # type: ignore[attr-defined]


def test_session_cover_of_a_job_that_finished_first_is_refused(engine: DomainEngine) -> None:
    # The plan saw j1 running; its run's finish got to the log first (first writer wins): the
    # new job may not answer j1's prompt again, so its write is refused and planned anew.
    invoke(engine, invocation("j1"))
    stale = plans.plan_invocation(engine, "s1", "", fold=True)
    engine.handle(c.FinishJob(job_id="j1", outcome="ok", result="done"))
    with pytest.raises(SessionMoved, match="would cover no job, not j1"):
        invoke(engine, invocation("j2", covers=stale.covers))
    fresh = plans.plan_invocation(engine, "s1", "", fold=True)
    invoke(engine, invocation("j2", covers=fresh.covers))

    assert fresh.covers == () and job(engine, "j1").state == "ok"
    assert job(engine, "j2").covers == () and job(engine, "j2").state == "running"


def test_session_fold_that_missed_a_new_running_job_is_refused(engine: DomainEngine) -> None:
    invoke(engine, invocation("j1"))
    refused(engine, c.AcceptJob(job_id="j2", session_id="s1", covers=()), SessionMoved)


def test_session_without_fold_supersedes_and_covers_nothing(engine: DomainEngine) -> None:
    invoke(engine, invocation("j1"))
    plan = plans.plan_invocation(engine, "s1", "", fold=False)
    invoke(engine, invocation("j2", covers=plan.covers))

    assert plan.covers is None
    assert job(engine, "j1").superseded_by == "j2" and job(engine, "j2").covers == ()


def test_session_covers_without_the_pointer_are_refused(engine: DomainEngine) -> None:
    invoke(engine, invocation("j1"))
    refused(
        engine,
        c.AcceptJob(job_id="w1", session_id="s1", owed=False, covers=("j1",)),
        InvalidArgument,
    )
