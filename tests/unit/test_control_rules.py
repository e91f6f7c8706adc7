"""A root controls its workers (ADR 0057), through the command API on a real log file and on
PostgreSQL: grants per target agent (a control without one refused, naming it, nothing
recorded), the default grants, the control revision that only controls move, compare-and-swap
on it, and a fork admitted like a spawn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine.domain import channel as ch
from engine.domain import commands as c
from engine.domain import controls as ctl
from engine.domain import pausing
from engine.domain.agents import DEFAULT_AGENT, DEFAULT_GRANTS, AgentPolicy
from engine.domain.engine import DomainEngine
from engine.domain.errors import (
    AdmissionRejected,
    Conflict,
    Forbidden,
    NotGranted,
    StaleRevision,
)
from engine.domain.rules import Settings
from engine.errors import InvalidArgument, InvalidTransition
from projections import open_engine, queries
from tests.support.backends import log_target
from tests.unit.test_rules import refused

DIGEST = "d" * 64
AGENTS = {
    "": DEFAULT_AGENT,
    "root": AgentPolicy(
        name="root",
        can_spawn=("worker", "other"),
        max_children=4,
        controls=(("worker", ("cancel", "pause", "continue", "fork", "steer")),),
    ),
    "boss": AgentPolicy(name="boss", can_spawn=("worker",)),  # no table: the default grants
    "worker": AgentPolicy(name="worker"),
    "other": AgentPolicy(name="other"),
}


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DomainEngine]:
    opened = open_engine(log_target(request.param, tmp_path), Settings(agents=AGENTS))
    opened.handle(c.CreateSession(session_id="s1", start_run_id="r"))
    yield opened
    opened.log.close()


def started(
    engine: DomainEngine, job_id: str, agent: str, parent: str | None = None, input: str = ""
) -> None:
    engine.handle(
        c.AcceptJob(job_id=job_id, session_id="s1", agent=agent, parent_job=parent, owed=False)
    )
    engine.handle(
        c.StartJob(
            job_id=job_id,
            run_id=f"run-{job_id}",
            token_digest=DIGEST,
            input=input,  # type: ignore[arg-type]
        )
    )


def row(engine: DomainEngine, job_id: str) -> queries.JobRow:
    found = queries.job(engine.log.connection(), job_id)
    assert found is not None, job_id
    return found


def by(caller: str, **kw: Any) -> dict[str, Any]:
    return {"caller_job": caller, "caller_token_digest": DIGEST, **kw}


def tree(engine: DomainEngine, root_agent: str = "root") -> None:
    """root1 (``root_agent``) with two workers and a worker of another agent below it."""
    started(engine, "root1", root_agent)
    started(engine, "w1", "worker", "root1", input=ch.INPUT_LINES)
    started(engine, "w2", "worker", "root1")
    if root_agent == "root":
        started(engine, "o1", "other", "root1")


def test_control_granted_cancel_by_a_root_reaches_its_worker_only(engine: DomainEngine) -> None:
    tree(engine)
    engine.handle(ctl.ControlJob(job_id="w1", action="cancel", reason="looping", **by("root1")))
    assert row(engine, "w1").state == "cancelling"
    assert row(engine, "w1").control_revision == 1
    assert row(engine, "w2").state == "running" and row(engine, "w2").control_revision == 0
    engine.handle(c.ConfirmJobCancelled(job_id="w1"))  # the runner's, not a control
    assert (row(engine, "w1").state, row(engine, "w1").control_revision) == ("cancelled", 1)


def test_control_without_its_grant_is_refused_naming_it(engine: DomainEngine) -> None:
    tree(engine)
    error = refused(engine, ctl.ControlJob(job_id="o1", action="cancel", **by("root1")), NotGranted)
    assert "no 'cancel' grant on agent 'other'" in str(error)
    assert error.fields["grant"] == "cancel"
    refused(engine, ctl.ControlJob(job_id="o1", action="pause", **by("root1")), NotGranted)
    # A worker is no ancestor of its sibling, whatever the grants; the operator keeps all.
    refused(engine, ctl.ControlJob(job_id="w2", action="cancel", **by("w1")), Forbidden)
    engine.handle(c.CancelJob(job_id="o1"))
    assert row(engine, "o1").state == "cancelling"


def test_control_default_grants_talk_to_the_channel_but_never_stop(
    engine: DomainEngine,
) -> None:
    assert AGENTS["boss"].grants("worker") == DEFAULT_GRANTS
    tree(engine, root_agent="boss")
    for command in (
        ctl.ControlJob(job_id="w1", action="cancel", **by("root1")),
        ctl.ControlJob(job_id="w1", action="pause", **by("root1")),
    ):
        refused(engine, command, NotGranted)
    engine.handle(ch.SendControl(job_id="w1", action="finalize", **by("root1")))
    assert row(engine, "w1").control_revision == 1


def test_control_revision_moves_by_one_per_control_and_never_by_output(
    engine: DomainEngine,
) -> None:
    tree(engine)
    engine.handle(c.RecordJobOutput(job_id="w2", text="tick\n"))
    engine.handle(c.RecordJobOutput(job_id="w2", text="tick\n"))
    assert row(engine, "w2").control_revision == 0
    engine.handle(ctl.ControlJob(job_id="w2", action="pause", expected_revision=0, **by("root1")))
    engine.handle(ctl.ControlJob(job_id="w2", action="continue", expected_revision=1))
    stale = refused(
        engine, ctl.ControlJob(job_id="w2", action="pause", expected_revision=1), StaleRevision
    )
    assert stale.fields == {"job_id": "w2", "expected": 1, "actual": 2}
    engine.handle(c.RecordJobOutput(job_id="w2", text="tick\n"))
    refused(
        engine,
        ch.SendControl(job_id="w1", action="steer", text="x", turn="t", expected_revision=3),
        StaleRevision,
    )
    engine.handle(ctl.ControlJob(job_id="w2", action="cancel", expected_revision=2, **by("root1")))
    assert row(engine, "w2").control_revision == 3


def test_control_fork_is_admitted_like_a_spawn_below_its_caller(engine: DomainEngine) -> None:
    tree(engine)
    engine.handle(c.RecordJobOutput(job_id="w2", text="step 1 done\n"))

    def fork(new: str, source: str = "w2", **kw: Any) -> c.ForkJob:
        item = c.AcceptJob(
            job_id=new,
            session_id="s1",
            agent=row(engine, source).agent,
            parent_job="root1",
            owed=False,
            caller_token_digest=DIGEST,
        )
        return ctl.ForkJob(job_id=source, fork=item, **by("root1", **kw))

    engine.handle(fork("f1", expected_revision=0))
    made = row(engine, "f1")
    assert (made.forked_from, made.parent_job, made.agent) == ("w2", "root1", "worker")
    assert row(engine, "w2").control_revision == 1 and row(engine, "w2").state == "running"
    refused(engine, fork("f2", expected_revision=0), StaleRevision)
    refused(engine, fork("f2", source="o1"), NotGranted)
    # root1 holds four children (w1, w2, o1, f1): its max_children, counted as for a spawn.
    assert refused(engine, fork("f2"), AdmissionRejected).fields["reason"] == "max_children"
    other_agent = c.AcceptJob(job_id="f3", session_id="s1", agent="other", owed=False)
    refused(engine, ctl.ForkJob(job_id="w2", fork=other_agent), InvalidArgument)
    engine.handle(c.FinishJob(job_id="w1", outcome="ok"))
    engine.handle(c.CancelJob(job_id="f1"))  # queued: cancelled at once, a control
    assert (row(engine, "f1").state, row(engine, "f1").control_revision) == ("cancelled", 1)
    refused(engine, fork("f4", source="w1"), InvalidTransition)  # an ended job forks no more


def test_control_continue_that_relaunches_is_recorded_with_the_new_runs_start(
    engine: DomainEngine,
) -> None:
    tree(engine)
    engine.handle(pausing.SuspendJob(job_id="w2", reason="host lost"))  # not a control
    assert row(engine, "w2").control_revision == 0
    relaunch = ctl.ControlJob(job_id="w2", action="continue", relaunch=True, **by("root1"))
    again = c.StartJob(job_id="w2", run_id="run-w2-2", token_digest=DIGEST, resumed=True)

    def continued(command: ctl.ControlJob) -> None:
        engine.log.write(lambda tx: [engine.handle_in(tx, command), engine.handle_in(tx, again)])

    head = engine.log.head()
    with pytest.raises(StaleRevision):
        continued(msgspec.structs.replace(relaunch, expected_revision=1))
    assert engine.log.head() == head
    continued(msgspec.structs.replace(relaunch, expected_revision=0))
    assert (row(engine, "w2").state, row(engine, "w2").control_revision) == ("running", 1)
    refused(engine, relaunch, Conflict)  # running again: nothing to relaunch
