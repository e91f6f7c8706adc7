"""Agents' rules (issue 14): who may spawn whom, the counted limits, run tokens, re-admission
and the result disposition order, one behaviour per test on a real log file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from engine.domain import commands as c
from engine.domain import pausing
from engine.domain.agents import DEFAULT_AGENT, AgentPolicy, Mode
from engine.domain.engine import DomainEngine
from engine.domain.errors import AdmissionRejected, Conflict, Forbidden, Unauthorized
from engine.domain.job import PatchEntry
from engine.domain.rules import Settings
from engine.errors import InvalidArgument, InvalidTransition
from projections import open_engine

AGENTS = {
    "": DEFAULT_AGENT,
    "root": AgentPolicy(name="root", can_spawn=("w", "writer", "root"), max_children=2),
    "w": AgentPolicy(name="w", max_active=3),
    "writer": AgentPolicy(name="writer", mode=Mode.WORKSPACE_WRITE),
    "solo": AgentPolicy(name="solo", can_spawn=("solo",), reject_ancestor_role=True),
}
DIGEST = "d" * 64
PATCH = PatchEntry(sha256="a" * 64, size=12, paths=("src/a.py",), base_commit="b" * 40)


def begin(job_id: str, **kw: object) -> c.BeginIntegration:
    return c.BeginIntegration(
        job_id=job_id,
        sha256=PATCH.sha256,
        before_tree="1" * 40,
        after_tree="2" * 40,
        paths=PATCH.paths,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[DomainEngine]:
    settings = Settings(agents=AGENTS, max_active_agents=6, max_active_writers=1, max_depth=3)
    engine = open_engine(tmp_path / "roles.db", settings)
    engine.handle(c.CreateSession(session_id="s1", start_run_id="r"))
    engine.handle(c.CreateSession(session_id="s2", start_run_id="r"))
    yield engine
    engine.log.close()


def started(engine: DomainEngine, job_id: str, agent: str, parent: str | None = None) -> None:
    engine.handle(
        c.AcceptJob(job_id=job_id, session_id="s1", agent=agent, parent_job=parent, owed=False)
    )
    engine.handle(c.StartJob(job_id=job_id, run_id=f"run-{job_id}", token_digest=DIGEST))


def child(job_id: str, agent: str = "w", parent: str = "root1", **kw: object) -> c.AcceptJob:
    return c.AcceptJob(
        job_id=job_id,
        session_id="s1",
        agent=agent,
        parent_job=parent,
        owed=False,
        caller_token_digest=DIGEST,
        **kw,  # type: ignore[arg-type]
    )


def test_roles_unknown_agent_is_invalid_argument(engine: DomainEngine) -> None:
    with pytest.raises(InvalidArgument, match="unknown agent 'ghost'"):
        engine.handle(c.AcceptJob(job_id="j", session_id="s1", agent="ghost"))


def test_roles_can_spawn_is_enforced(engine: DomainEngine) -> None:
    started(engine, "w1", "w")
    with pytest.raises(Forbidden):
        engine.handle(child("j", parent="w1"))


def test_roles_max_children_counts_capacity_holding_children(engine: DomainEngine) -> None:
    started(engine, "root1", "root")
    engine.handle(child("a"))
    engine.handle(child("b"))
    with pytest.raises(AdmissionRejected) as refused:
        engine.handle(child("c"))
    assert refused.value.fields["reason"] == "max_children"
    engine.handle(c.CancelJob(job_id="a"))  # a queued child ends at once: its place is free
    engine.handle(child("c"))


def test_roles_max_active_counts_across_sessions(engine: DomainEngine) -> None:
    for n, sid in enumerate(["s1", "s2", "s1"]):
        engine.handle(c.AcceptJob(job_id=f"w{n}", session_id=sid, agent="w", owed=False))
    with pytest.raises(AdmissionRejected) as refused:
        engine.handle(c.AcceptJob(job_id="w9", session_id="s2", agent="w", owed=False))
    assert refused.value.fields["reason"] == "max_active"


def test_roles_a_batch_is_all_or_nothing(engine: DomainEngine) -> None:
    started(engine, "root1", "root")
    head = engine.log.head()
    with pytest.raises(AdmissionRejected):
        engine.handle(c.AcceptJobs(jobs=(child("a"), child("b"), child("c"))))
    assert engine.log.head() == head


def test_roles_writers_need_a_scope_and_are_counted_per_session(engine: DomainEngine) -> None:
    started(engine, "root1", "root")
    with pytest.raises(InvalidArgument, match="needs a write_scope"):
        engine.handle(child("a", agent="writer"))
    with pytest.raises(InvalidArgument, match="read-only"):
        engine.handle(child("a", write_scope=("src",)))
    engine.handle(child("a", agent="writer", write_scope=("src/a",)))
    with pytest.raises(AdmissionRejected) as refused:
        engine.handle(child("b", agent="writer", write_scope=("src/b",)))
    assert refused.value.fields["reason"] == "max_active_writers"


def test_roles_reject_ancestor_role(engine: DomainEngine) -> None:
    started(engine, "solo1", "solo")
    with pytest.raises(AdmissionRejected) as refused:
        engine.handle(child("again", agent="solo", parent="solo1"))
    assert refused.value.fields["reason"] == "ancestor_role"


def test_roles_a_token_of_another_run_or_an_ended_run_is_refused(engine: DomainEngine) -> None:
    started(engine, "root1", "root")
    with pytest.raises(Unauthorized):
        engine.handle(msgspec.structs.replace(child("a"), caller_token_digest="e" * 64))
    engine.handle(c.FinishJob(job_id="root1", outcome="ok", run_id="run-root1"))
    with pytest.raises(Conflict):  # a terminal parent spawns nothing, whatever the token
        engine.handle(child("a"))


def test_roles_a_late_finish_of_an_earlier_run_is_refused(engine: DomainEngine) -> None:
    started(engine, "w1", "w")
    with pytest.raises(Conflict, match="not its current run"):
        engine.handle(c.FinishJob(job_id="w1", outcome="ok", run_id="run-old"))


def test_roles_readmission_goes_through_the_counts(engine: DomainEngine) -> None:
    for n in range(3):
        started(engine, f"w{n}", "w")
    # A cold pause whose run is gone releases its place (a live pause holds it, ADR 0058).
    engine.handle(pausing.PauseJob(job_id="w0", mode="cold"))
    engine.handle(pausing.RetireJob(job_id="w0"))
    engine.handle(c.AcceptJob(job_id="w3", session_id="s2", agent="w", owed=False))
    with pytest.raises(AdmissionRejected) as refused:
        engine.handle(c.StartJob(job_id="w0", run_id="again"))
    assert refused.value.fields["reason"] == "max_active"


def test_result_disposition_follows_its_machine(engine: DomainEngine) -> None:
    started(engine, "w1", "w")
    with pytest.raises(Conflict, match="no result"):
        engine.handle(c.ReadJobResult(job_id="w1"))
    engine.handle(c.FinishJob(job_id="w1", outcome="ok", run_id="run-w1", patch=PATCH))
    with pytest.raises(InvalidTransition):
        engine.handle(c.AcceptJobResult(job_id="w1", reason="unread yet"))
    engine.handle(c.ReadJobResult(job_id="w1"))
    with pytest.raises(InvalidTransition):
        engine.handle(begin("w1"))
    engine.handle(c.AcceptJobResult(job_id="w1", reason="fine"))
    with pytest.raises(InvalidTransition):
        engine.handle(c.RejectJobResult(job_id="w1", reason="changed my mind"))
    engine.handle(c.TaintSession(session_id="s1", reason="leak"))
    with pytest.raises(Conflict, match="tainted"):
        engine.handle(begin("w1"))


def test_result_judging_needs_an_ancestor(engine: DomainEngine) -> None:
    started(engine, "root1", "root")
    started(engine, "other", "root")
    engine.handle(child("a"))
    engine.handle(c.StartJob(job_id="a", run_id="run-a"))
    engine.handle(c.FinishJob(job_id="a", outcome="ok", run_id="run-a"))
    engine.handle(c.ReadJobResult(job_id="a", caller_job="other", caller_token_digest=DIGEST))
    with pytest.raises(Forbidden, match="not an ancestor"):
        engine.handle(
            c.AcceptJobResult(
                job_id="a", reason="x", caller_job="other", caller_token_digest=DIGEST
            )
        )
    engine.handle(
        c.AcceptJobResult(job_id="a", reason="x", caller_job="root1", caller_token_digest=DIGEST)
    )
