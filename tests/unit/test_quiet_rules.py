"""The quiet gate (ADR 0050): a job owed to a caller ends only once its run has ended and no job
below it is live, in the commit that ends the last of them; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import FixedClock
from engine.domain import commands as c
from engine.domain import pausing
from engine.domain.rows import JobRow, TaskRow
from engine.domain.rules.pointer import owed_replies
from engine.engine import CommandResult, Engine
from projections import open_engine, queries
from tests.support.backends import log_target
from tests.unit.test_rules import job, session


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path, clock: FixedClock) -> Iterator[Engine]:
    opened = open_engine(log_target(request.param, tmp_path), clock=clock)
    yield opened
    opened.log.close()


def finish(engine: Engine, jid: str, outcome: str = "ok") -> CommandResult:
    return engine.handle(c.FinishJob(job_id=jid, outcome=outcome, result=f"reply of {jid}"))


def replies(engine: Engine, done: CommandResult) -> list[str]:
    """The owed replies the commit ``done`` made (what the notify hook runs for)."""
    count = done.last_position - done.first_position + 1
    return owed_replies(engine.log.read_all(after_position=done.first_position - 1, limit=count))


def owes(engine: Engine, sid: str = "s1") -> Any:
    found = queries.session(engine.log.connection(), sid)
    assert found is not None
    return (found.owes.kind, found.owes.ref) if found.owes else (None, None)


def job_row(engine: Engine, jid: str) -> JobRow:
    found = queries.job(engine.log.connection(), jid)
    assert found is not None, f"no job {jid}"
    return found


def task_row(engine: Engine, tid: str) -> TaskRow:
    found = queries.task(engine.log.connection(), tid)
    assert found is not None, f"no task {tid}"
    return found


def state(engine: Engine, kind: str, entity_id: str) -> str:
    return (job_row if kind == "job" else task_row)(engine, entity_id).state


def root_with_children(engine: Engine, *children: str) -> None:
    """Session s1 owing running job ``root``, with running workers ``children`` below it."""
    session(engine)
    job(engine, "root", start=True)
    for child in children:
        job(engine, child, parent_job="root", owed=False, start=True)


def test_quiet_owed_root_settles_until_its_last_child_ends(engine: Engine) -> None:
    root_with_children(engine, "w1", "w2")
    done = finish(engine, "root")
    assert replies(engine, done) == []
    root = job_row(engine, "root")
    # The run's end is recorded; the job is not finished and its caller is still owed.
    assert (root.state, root.result, root.outcome) == ("settling", "reply of root", "ok")
    assert root.finished_at is None
    assert owes(engine) == ("job", "root")

    assert replies(engine, finish(engine, "w1")) == []
    assert state(engine, "job", "root") == "settling"

    done = finish(engine, "w2", "error")  # a child's error is its own, not the root's
    assert replies(engine, done) == ["root"]  # ended in the child's commit
    root = job_row(engine, "root")
    assert (root.state, root.result) == ("ok", "reply of root")
    assert root.finished_at is not None
    assert owes(engine) == (None, None)
    settled = engine.log.read_stream("job:root")[-1]
    assert settled.event_type == "job.settled"
    assert done.first_position <= settled.position <= done.last_position


def test_quiet_root_keeps_its_own_error_outcome(engine: Engine) -> None:
    root_with_children(engine, "w1")
    finish(engine, "root", "error")
    finish(engine, "w1")
    assert state(engine, "job", "root") == "error"


def test_quiet_root_without_live_children_finishes_at_once(engine: Engine) -> None:
    root_with_children(engine, "w1")
    finish(engine, "w1")
    done = finish(engine, "root")
    assert state(engine, "job", "root") == "ok"
    assert replies(engine, done) == ["root"]


def test_quiet_grandchild_keeps_the_root_settling(engine: Engine) -> None:
    root_with_children(engine, "w1")
    job(engine, "g1", parent_job="w1", owed=False, start=True)
    finish(engine, "root")
    finish(engine, "w1")  # not owed: a worker ends at once, its own child still running
    assert (state(engine, "job", "w1"), state(engine, "job", "root")) == ("ok", "settling")
    assert replies(engine, finish(engine, "g1")) == ["root"]
    assert state(engine, "job", "root") == "ok"


@pytest.mark.parametrize("how", ["cancel", "supersede"])
def test_quiet_any_end_of_the_last_child_completes_the_root(engine: Engine, how: str) -> None:
    root_with_children(engine, "w1")
    job(engine, "w2", parent_job="root", owed=False)  # queued: cancelled at once
    finish(engine, "root")
    finish(engine, "w1")
    command: c.Command = (
        c.CancelJob(job_id="w2", reason="not needed")
        if how == "cancel"
        else c.SupersedeJob(job_id="w2", superseded_by="w3")
    )
    done = engine.handle(command)
    assert state(engine, "job", "root") == "ok"
    assert replies(engine, done) == ["root"]


def test_quiet_paused_child_keeps_the_root_settling(engine: Engine) -> None:
    root_with_children(engine, "w1")
    engine.handle(pausing.PauseJob(job_id="w1"))
    finish(engine, "root")
    assert state(engine, "job", "root") == "settling"
    engine.handle(c.CancelJob(job_id="w1"))  # paused: cancelled at once
    assert state(engine, "job", "root") == "ok"


def test_quiet_cancel_of_a_settling_root_ends_it_and_its_subtree(engine: Engine) -> None:
    root_with_children(engine, "w1")
    finish(engine, "root")
    done = engine.handle(c.CancelJob(job_id="root", reason="operator"))
    assert replies(engine, done) == []  # a cancel is no reply: no hook
    assert state(engine, "job", "root") == "cancelled"
    assert state(engine, "job", "w1") == "cancelling"  # its runner confirms
    assert owes(engine) == (None, None)
    engine.handle(c.ConfirmJobCancelled(job_id="w1"))
    assert state(engine, "job", "root") == "cancelled"


def test_quiet_new_prompt_supersedes_a_settling_root(engine: Engine) -> None:
    root_with_children(engine, "w1")
    finish(engine, "root")
    job(engine, "next", start=True)
    assert job_row(engine, "root").superseded_by == "next"
    assert owes(engine) == ("job", "next")
    done = finish(engine, "next")  # the superseded root's workers do not gate the new job
    assert replies(engine, done) == ["next"]


def test_quiet_a_worker_with_children_finishes_at_once(engine: Engine) -> None:
    root_with_children(engine, "w1")
    job(engine, "g1", parent_job="w1", owed=False, start=True)
    finish(engine, "w1")
    assert state(engine, "job", "w1") == "ok"


def test_quiet_a2a_task_completes_when_its_jobs_subtree_is_quiet(engine: Engine) -> None:
    session(engine)
    engine.handle(c.CreateTask(task_id="t1", session_id="s1", message_id="m1", text="hi"))
    job(engine, "tj", task_id="t1", owed=False, start=True)
    job(engine, "w1", parent_job="tj", owed=False, start=True)
    finish(engine, "tj")
    assert (state(engine, "job", "tj"), state(engine, "task", "t1")) == ("settling", "working")
    assert owes(engine) == ("a2a", "t1")
    finish(engine, "w1")
    task = task_row(engine, "t1")
    assert (task.state, task.result) == ("completed", "reply of tj")
    assert owes(engine) == (None, None)


def test_quiet_recovery_resumes_the_cut_off_workers_of_a_settling_root(engine: Engine) -> None:
    root_with_children(engine, "w1", "w2")
    finish(engine, "root")
    finish(engine, "w1")
    engine.handle(pausing.SuspendJob(job_id="w2", reason="run cut off"))
    conn = engine.log.connection()
    assert queries.resumable_jobs(conn, cut_off="run cut off") == ["w2"]
