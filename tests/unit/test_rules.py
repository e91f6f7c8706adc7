"""The domain rules of design.md §4.2-§4.7, one behaviour per test, through the command API."""

from __future__ import annotations

from typing import Any

import pytest

from engine import ConcurrencyError, EngineError, FencedOut, FixedClock, InvalidTransition
from engine.domain import commands as c
from engine.domain import pausing
from engine.domain.errors import (
    AdmissionRejected,
    AlreadyExists,
    Conflict,
    LeaseBusy,
    NotFound,
    NotLeaseHolder,
)
from engine.domain.rules.pointer import is_owed_reply
from engine.engine import Engine
from engine.errors import InvalidArgument
from tests.support.tickets import TicketOpened


def row(engine: Engine, table: str, key: str, value: str) -> dict[str, Any]:
    cur = engine.log.connection().cursor()
    cur.execute(f"SELECT * FROM {table} WHERE {key} = ?", (value,))
    names = [d[0] for d in cur.getdescription()]
    found = cur.fetchall()
    assert found, f"no {table} row {value}"
    return dict(zip(names, found[0], strict=True))


def state(engine: Engine, kind: str, entity_id: str) -> str:
    table, key = {
        "session": ("sessions", "session_id"),
        "job": ("jobs", "job_id"),
        "task": ("tasks", "task_id"),
        "lease": ("leases", "name"),
    }[kind]
    return str(row(engine, table, key, entity_id)["state"])


def refused(engine: Engine, command: c.Command, error: type[EngineError]) -> EngineError:
    head = engine.log.head()
    with pytest.raises(error) as caught:
        engine.handle(command)
    assert engine.log.head() == head, "a refused command must append nothing"
    return caught.value


def session(engine: Engine, sid: str = "s1", **kw: Any) -> None:
    engine.handle(c.CreateSession(session_id=sid, start_run_id="r1", **kw))


def job(engine: Engine, jid: str, sid: str = "s1", start: bool = False, **kw: Any) -> None:
    engine.handle(c.AcceptJob(job_id=jid, session_id=sid, **kw))
    if start:
        engine.handle(c.StartJob(job_id=jid, run_id=f"run-{jid}", pid=100))


# -- reply pointer (design.md §4.6) -------------------------------------------------------------


def test_rules_new_job_supersedes_the_owed_job(engine: Engine) -> None:
    session(engine)
    job(engine, "j1", start=True)
    job(engine, "j2")
    assert state(engine, "job", "j1") == "superseded"
    assert row(engine, "jobs", "job_id", "j1")["superseded_by"] == "j2"
    assert row(engine, "sessions", "session_id", "s1")["owes_ref"] == "j2"


@pytest.mark.parametrize("pointer", ["a2a", "relay"])
def test_rules_new_job_is_refused_on_a_session_owing_a2a_or_relay(
    engine: Engine, pointer: str
) -> None:
    session(engine)
    if pointer == "a2a":
        engine.handle(c.CreateTask(task_id="t1", session_id="s1"))
    else:
        engine.handle(c.OweRelay(session_id="s1", to_session="caller"))
    error = refused(engine, c.AcceptJob(job_id="j1", session_id="s1"), Conflict)
    assert error.to_dict()["owes"] == pointer


def test_rules_a2a_task_supersedes_owed_job_then_takes_the_pointer(engine: Engine) -> None:
    session(engine)
    job(engine, "j1", start=True)
    engine.handle(c.CreateTask(task_id="t1", session_id="s1"))
    assert row(engine, "jobs", "job_id", "j1")["superseded_by"] == "a2a:t1"
    owes = row(engine, "sessions", "session_id", "s1")
    assert (owes["owes_kind"], owes["owes_ref"]) == ("a2a", "t1")
    engine.handle(c.CompleteTask(task_id="t1", result="r"))
    assert row(engine, "sessions", "session_id", "s1")["owes_kind"] is None


def test_rules_relay_supersedes_owed_job(engine: Engine) -> None:
    session(engine)
    job(engine, "j1")
    engine.handle(c.OweRelay(session_id="s1", to_session="boss"))
    assert row(engine, "jobs", "job_id", "j1")["superseded_by"] == "relay:boss"
    engine.handle(c.SettleRelay(session_id="s1"))
    job(engine, "j2")
    assert row(engine, "sessions", "session_id", "s1")["owes_ref"] == "j2"


def test_rules_finishing_the_owed_job_settles_the_pointer(engine: Engine) -> None:
    session(engine)
    job(engine, "j1", start=True)
    engine.handle(c.FinishJob(job_id="j1", outcome="ok", result="done"))
    assert row(engine, "sessions", "session_id", "s1")["owes_kind"] is None
    assert row(engine, "jobs", "job_id", "j1")["result"] == "done"


def test_rules_a_worker_job_does_not_take_the_pointer(engine: Engine) -> None:
    session(engine)
    job(engine, "j1", start=True)
    job(engine, "w1", parent_job="j1", owed=False)
    assert state(engine, "job", "j1") == "running"
    assert row(engine, "sessions", "session_id", "s1")["owes_ref"] == "j1"


def _finished_as_owed_reply(engine: Engine, jid: str) -> bool:
    """Finish ``jid`` ok; whether its commit settled the pointer at it (``is_owed_reply``)."""
    done = engine.handle(c.FinishJob(job_id=jid, outcome="ok", result=f"reply of {jid}"))
    count = done.last_position - done.first_position + 1
    appended = engine.log.read_all(after_position=done.first_position - 1, limit=count)
    return is_owed_reply(jid, (e.event for e in appended))


def test_rules_only_the_owed_jobs_finish_is_an_owed_reply(engine: Engine) -> None:
    """What the notify hook runs for (design.md §9): the end of the job its session owes; not
    a worker's, nor an A2A task's job's, nor an earlier prompt's (superseded, it cannot end)."""
    session(engine)
    job(engine, "j1", start=True)
    job(engine, "w1", parent_job="j1", owed=False, start=True)
    job(engine, "w2", owed=False, start=True)  # the operator's, on /v1/jobs
    assert not _finished_as_owed_reply(engine, "w1")
    assert not _finished_as_owed_reply(engine, "w2")
    assert _finished_as_owed_reply(engine, "j1")
    job(engine, "j2", start=True)
    job(engine, "j3", start=True)  # a newer prompt: j2 is superseded, j3 is owed
    refused(engine, c.FinishJob(job_id="j2", outcome="ok"), InvalidTransition)
    assert _finished_as_owed_reply(engine, "j3")
    session(engine, "s2")
    engine.handle(c.CreateTask(task_id="t1", session_id="s2"))
    job(engine, "a1", "s2", task_id="t1", owed=False, start=True)
    assert not _finished_as_owed_reply(engine, "a1")  # it settles the task, not a job


# -- jobs leave running once ----------------------------------------------------------------


def test_rules_first_finish_wins_and_a_late_one_is_refused(engine: Engine) -> None:
    session(engine)
    job(engine, "j1", start=True)
    engine.handle(c.FinishJob(job_id="j1", outcome="error", result="boom"))
    error = refused(engine, c.FinishJob(job_id="j1", outcome="ok"), InvalidTransition)
    assert error.to_dict()["state"] == "error"
    refused(engine, c.SupersedeJob(job_id="j1", superseded_by="x"), InvalidTransition)


def test_rules_notify_records_only_after_ok_or_error(engine: Engine) -> None:
    session(engine)
    job(engine, "j1", start=True)
    refused(engine, c.RecordNotifyStarted(job_id="j1", pid=5), InvalidTransition)
    engine.handle(c.FinishJob(job_id="j1", outcome="ok"))
    engine.handle(c.RecordNotifyStarted(job_id="j1", pid=5))
    engine.handle(c.RecordNotifyFinished(job_id="j1", exit_code=0, ms=12, stdout_tail="sent"))
    found = row(engine, "jobs", "job_id", "j1")
    assert (found["state"], found["notify_pid"], found["notify_exit_code"]) == ("ok", 5, 0)


# -- session precedence and terminal cascade ------------------------------------------------


def test_rules_cancel_beats_stop_beats_finish(engine: Engine) -> None:
    session(engine)
    engine.handle(c.StopSession(session_id="s1", wait=True))
    refused(engine, c.FinishSession(session_id="s1"), InvalidTransition)
    engine.handle(c.CancelSession(session_id="s1", wait=True))
    assert state(engine, "session", "s1") == "cancelling"
    refused(engine, c.StopSession(session_id="s1"), InvalidTransition)
    refused(engine, c.FinishSession(session_id="s1"), InvalidTransition)
    engine.handle(c.CancelSession(session_id="s1"))
    assert state(engine, "session", "s1") == "cancelled"


def test_rules_operator_detach_wins_over_a_late_finish(engine: Engine) -> None:
    session(engine)
    engine.handle(c.DetachSession(session_id="s1", by="operator"))
    error = refused(engine, c.FinishSession(session_id="s1"), InvalidTransition)
    assert "operator detach" in str(error)
    engine.handle(c.AttachSession(session_id="s1"))
    engine.handle(c.FinishSession(session_id="s1"))
    assert state(engine, "session", "s1") == "completed"


def test_rules_terminal_session_cancels_every_live_job_in_the_same_transaction(
    engine: Engine,
) -> None:
    session(engine)
    job(engine, "j1", start=True)
    job(engine, "w1", parent_job="j1", owed=False)
    job(engine, "w2", parent_job="j1", owed=False, start=True)
    engine.handle(pausing.PauseJob(job_id="w2"))
    result = engine.handle(c.StopSession(session_id="s1", reason="bye"))
    assert [state(engine, "job", j) for j in ("j1", "w1", "w2")] == ["cancelled"] * 3
    assert state(engine, "session", "s1") == "stopped"
    positions = {e.position for e in engine.log.read_all(result.first_position - 1)}
    assert positions == set(range(result.first_position, result.last_position + 1))
    assert engine.log.read_all(result.last_position) == []  # nothing after the command


def test_rules_finish_with_recoverable_jobs_detaches_instead(engine: Engine) -> None:
    session(engine)
    job(engine, "j1", start=True)
    engine.handle(pausing.SuspendJob(job_id="j1", reason="runner lost"))
    engine.handle(c.FinishSession(session_id="s1"))
    assert state(engine, "session", "s1") == "detached"
    assert state(engine, "job", "j1") == "suspended"


def test_rules_terminal_session_cannot_resume_and_tainted_needs_permission(
    engine: Engine,
) -> None:
    session(engine, "done")
    engine.handle(c.FinishSession(session_id="done", requested="failed"))
    refused(engine, c.ResumeSession(session_id="done"), InvalidTransition)
    refused(engine, c.ResumeSession(session_id="done", allow_tainted=True), InvalidTransition)
    session(engine, "dirty")
    engine.handle(c.TaintSession(session_id="dirty", reason="patch lost"))
    engine.handle(c.DetachSession(session_id="dirty"))
    refused(engine, c.ResumeSession(session_id="dirty"), Conflict)
    refused(engine, c.AcceptJob(job_id="j9", session_id="dirty"), Conflict)
    engine.handle(c.ResumeSession(session_id="dirty", allow_tainted=True))
    assert state(engine, "session", "dirty") == "starting"
    assert row(engine, "sessions", "session_id", "dirty")["tainted"] == 1


# -- admission and capacity (design.md §4.7) ----------------------------------------------------


def test_rules_capacity_is_exact_and_a_live_pause_keeps_it(engine: Engine) -> None:
    session(engine, resource_group="cpu")  # 1 of 2 units
    job(engine, "j1", resource_group="cpu", start=True)  # 2 of 2
    error = refused(
        engine, c.AcceptJob(job_id="j2", session_id="s1", resource_group="cpu"), AdmissionRejected
    )
    assert error.to_dict() | {"message": ""} == {
        "code": "admission_rejected",
        "message": "",
        "reason": "capacity",
        "resource_group": "cpu",
        "used": 2,
        "limit": 2,
        "requested": 1,
    }
    engine.handle(pausing.PauseJob(job_id="j1"))  # a live pause keeps its unit (ADR 0058)
    refused(
        engine, c.AcceptJob(job_id="j2", session_id="s1", resource_group="cpu"), AdmissionRejected
    )
    engine.handle(pausing.ContinueJob(job_id="j1"))  # nothing to re-admit: it goes on at once
    assert state(engine, "job", "j1") == "running"


def test_rules_restarting_suspended_work_is_readmitted(engine: Engine) -> None:
    session(engine)
    job(engine, "j1", resource_group="gpu", start=True)  # 1 of 1
    engine.handle(pausing.SuspendJob(job_id="j1"))  # releases it
    job(engine, "j2", resource_group="gpu", owed=False)
    refused(engine, c.StartJob(job_id="j1", run_id="again"), AdmissionRejected)
    engine.handle(c.CancelJob(job_id="j2"))
    engine.handle(c.StartJob(job_id="j1", run_id="again", resumed=True))
    assert row(engine, "jobs", "job_id", "j1")["runs"] == 2


def test_rules_batch_is_admitted_all_or_nothing(engine: Engine) -> None:
    session(engine)
    batch = [
        c.AcceptJob(job_id=f"b{i}", session_id="s1", resource_group="cpu", owed=False)
        for i in range(3)
    ]
    error = refused(engine, c.AcceptJobs(jobs=tuple(batch)), AdmissionRejected)
    assert error.to_dict()["reason"] == "capacity"
    assert engine.log.connection().execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]
    engine.handle(c.AcceptJobs(jobs=tuple(batch[:2])))
    assert state(engine, "job", "b1") == "queued"


def test_rules_write_scopes_may_not_overlap(engine: Engine) -> None:
    session(engine)
    job(engine, "j1", write_scope=("src/app",), owed=False)
    error = refused(
        engine,
        c.AcceptJob(job_id="j2", session_id="s1", write_scope=("src",), owed=False),
        AdmissionRejected,
    )
    assert (error.to_dict()["reason"], error.to_dict()["held_by"]) == ("write_scope_conflict", "j1")
    job(engine, "j3", write_scope=("docs",), owed=False)


def test_rules_unknown_resource_group_is_a_clear_error(engine: Engine) -> None:
    refused(engine, c.CreateSession(session_id="s1", resource_group="tpu"), InvalidArgument)


# -- lineage --------------------------------------------------------------------------------


def test_rules_lineage_depth_and_cascading_cancel(engine: Engine) -> None:
    session(engine)
    job(engine, "root", start=True)
    job(engine, "child", parent_job="root", owed=False, start=True)
    job(engine, "grandchild", parent_job="child", owed=False)
    assert row(engine, "jobs", "job_id", "grandchild")["depth"] == 3
    refused(
        engine,
        c.AcceptJob(job_id="deep", session_id="s1", parent_job="grandchild", owed=False),
        AdmissionRejected,
    )  # max_depth 3
    engine.handle(c.CancelJob(job_id="root", reason="no longer needed"))
    assert [state(engine, "job", j) for j in ("root", "child", "grandchild")] == [
        "cancelling",
        "cancelling",
        "cancelled",
    ]
    engine.handle(c.ConfirmJobCancelled(job_id="root"))
    assert state(engine, "job", "root") == "cancelled"
    assert row(engine, "sessions", "session_id", "s1")["owes_kind"] is None


def test_rules_child_of_another_session_or_dead_parent_is_refused(engine: Engine) -> None:
    session(engine, "a")
    session(engine, "b")
    job(engine, "pa", sid="a")
    refused(engine, c.AcceptJob(job_id="x", session_id="b", parent_job="pa", owed=False), Conflict)
    refused(
        engine, c.AcceptJob(job_id="x", session_id="a", parent_job="nope", owed=False), NotFound
    )


# -- ids, duplicates, If-Match ---------------------------------------------------------------


def test_rules_duplicate_command_appends_nothing_and_reports_the_first(engine: Engine) -> None:
    session(engine)
    first = engine.handle(c.AcceptJob(job_id="j1", session_id="s1", command_id="inv-1"))
    again = engine.handle(c.AcceptJob(job_id="j-other", session_id="s1", command_id="inv-1"))
    assert again.duplicate and not first.duplicate
    assert (again.first_position, again.last_position) == (
        first.first_position,
        first.last_position,
    )
    refused(engine, c.AcceptJob(job_id="j1", session_id="s1"), AlreadyExists)


def test_rules_if_match_version_is_checked(engine: Engine) -> None:
    session(engine)
    version = row(engine, "sessions", "session_id", "s1")["version"]
    refused(engine, c.PauseSession(session_id="s1", expected_version=version + 1), ConcurrencyError)
    engine.handle(c.PauseSession(session_id="s1", expected_version=version))


# -- lease (tenure only) ---------------------------------------------------------------------


def test_rules_lease_acquire_renew_takeover_release(engine: Engine, clock: FixedClock) -> None:
    engine.handle(c.AcquireLease(holder="a", host="h1", pid=1))
    assert row(engine, "leases", "name", "workspace")["epoch"] == 1
    refused(engine, c.AcquireLease(holder="b"), LeaseBusy)
    refused(engine, c.RenewLease(holder="b", epoch=1), NotLeaseHolder)
    clock.advance(30)
    engine.handle(c.RenewLease(holder="a", epoch=1))
    clock.advance(30)
    refused(engine, c.TakeOverLease(holder="b"), LeaseBusy)  # renewed 30 s ago: not stale
    clock.advance(16)
    engine.handle(c.TakeOverLease(holder="b", host="h2", pid=2))
    lease = row(engine, "leases", "name", "workspace")
    assert (lease["holder"], lease["epoch"]) == ("b", 2)
    refused(engine, c.ReleaseLease(holder="a", epoch=1), NotLeaseHolder)
    engine.handle(c.ReleaseLease(holder="b", epoch=2))
    assert state(engine, "lease", "workspace") == "released"
    engine.handle(c.AcquireLease(holder="c"))
    assert row(engine, "leases", "name", "workspace")["epoch"] == 3


def test_rules_a_new_epoch_fences_the_old_holder_out(engine: Engine, clock: FixedClock) -> None:
    engine.handle(c.AcquireLease(holder="a"))
    engine.log.epoch = 1
    session(engine)
    clock.advance(60)
    engine.handle(c.TakeOverLease(holder="b"))  # epoch 2, appended with epoch 2
    with pytest.raises(FencedOut):
        engine.handle(c.AcceptJob(job_id="late", session_id="s1"))  # still writes as epoch 1


def test_rules_unknown_entities_are_not_found(engine: Engine) -> None:
    for command in (
        c.StartJob(job_id="nope", run_id="r"),
        c.PauseSession(session_id="nope"),
        c.CompleteTask(task_id="nope"),
    ):
        refused(engine, command, NotFound)


def test_rules_engine_refuses_anything_but_a_command(engine: Engine) -> None:
    with pytest.raises(InvalidArgument):
        engine.handle(TicketOpened())  # type: ignore[arg-type]


# -- tasks worked by jobs (A2A) ---------------------------------------------------------------


def test_rules_a_job_working_for_a_task_starts_and_ends_it(engine: Engine) -> None:
    session(engine)
    engine.handle(c.CreateTask(task_id="t1", session_id="s1"))
    job(engine, "j1", task_id="t1", owed=False, start=True)
    assert state(engine, "task", "t1") == "working"
    engine.handle(c.FinishJob(job_id="j1", outcome="ok", result="the answer"))
    task = row(engine, "tasks", "task_id", "t1")
    assert (task["state"], task["result"]) == ("completed", "the answer")
    assert row(engine, "sessions", "session_id", "s1")["owes_kind"] is None
    engine.handle(c.CreateTask(task_id="t2", session_id="s1"))
    job(engine, "j2", task_id="t2", owed=False, start=True)
    engine.handle(c.FinishJob(job_id="j2", outcome="error", result="it broke"))
    assert row(engine, "tasks", "task_id", "t2")["state"] == "failed"


def test_rules_cancelling_a_task_cancels_the_job_working_for_it(engine: Engine) -> None:
    session(engine)
    engine.handle(c.CreateTask(task_id="t1", session_id="s1"))
    job(engine, "j1", task_id="t1", owed=False, start=True)
    engine.handle(c.CancelTask(task_id="t1", text="Canceled by the caller."))
    assert state(engine, "task", "t1") == "canceled"
    assert state(engine, "job", "j1") == "cancelling"  # its runner confirms once it is gone
