"""The named reads of projections.queries, over a real log written through the command API."""

from __future__ import annotations

from typing import Any

import msgspec

from engine import FixedClock
from engine.clock import format_time
from engine.domain import commands as c
from engine.domain import ids, pausing
from engine.domain.rows import JobRow, LeaseRow, SessionRow, TaskRow
from projections import queries, rows


def conn(engine: Any) -> Any:
    return engine.log.connection()


def test_queries_lease_reads(engine: Any) -> None:
    assert queries.lease(conn(engine), "workspace") is None
    engine.handle(c.AcquireLease(holder="me", host="h", pid=7))
    held = queries.lease_held(conn(engine), "workspace")
    assert held is not None and (held.holder, held.epoch, held.state) == ("me", 1, "held")
    engine.handle(c.ReleaseLease(holder="me", epoch=1))
    assert queries.lease_held(conn(engine), "workspace") is None
    assert [(r.name, r.state, r.pid) for r in queries.leases(conn(engine))] == [
        ("workspace", "released", 7)
    ]


def test_queries_sessions_and_jobs_by_name_not_position(engine: Any) -> None:
    engine.handle(c.CreateSession(session_id="s1", has_controller=True))
    engine.handle(c.StartSession(session_id="s1", run_id="r1", pid=1, start_token="t"))
    engine.handle(c.TaintSession(session_id="s1", reason="looked odd"))
    record = queries.session(conn(engine), "s1")
    assert record is not None
    assert (record.state, record.has_controller, record.tainted) == ("running", True, True)
    assert record.taint_reasons == ("looked odd",)
    assert queries.session(conn(engine), "nobody") is None
    engine.handle(c.CreateSession(session_id="s2", start_run_id="r"))
    for jid in ("a", "b", "c"):
        engine.handle(c.AcceptJob(job_id=jid, session_id="s2", owed=False))
    engine.handle(
        c.AcceptJob(
            job_id="inv1", session_id="s2", owed=False, command_id=ids.invocation_command("k")
        )
    )
    first = queries.jobs_page(conn(engine), "s2", "queued", None, 2)
    assert [j.job_id for j in first.rows] == ["a", "b"] and first.next == "b"
    rest = queries.jobs_page(conn(engine), "s2", None, first.next, 10)
    assert [j.job_id for j in rest.rows] == ["c", "inv1"] and rest.next is None
    assert queries.sessions_page(conn(engine), None, None, 1).next == "s1"
    assert queries.find_invocation(conn(engine), "k") == "inv1"
    assert queries.find_invocation(conn(engine), "a") == "a"
    assert queries.find_invocation(conn(engine), "nothing") is None
    body = queries.job_body(conn(engine), "inv1")
    assert body is not None and body.caller_id == "k" and not body.terminal
    assert queries.job_session(conn(engine), "a") == "s2"
    assert queries.job_state(conn(engine), "zz") is None


def test_queries_runs_notifies_and_recovery_reads(engine: Any) -> None:
    assert not queries.busy(conn(engine)) and queries.last_job_update(conn(engine)) is None
    engine.handle(c.CreateSession(session_id="s", start_run_id="r"))
    engine.handle(c.AcceptJob(job_id="j1", session_id="s"))  # owed: resumable after a cut
    engine.handle(c.StartJob(job_id="j1", run_id="run1", pid=42, start_token="tok", epoch=0))
    assert queries.busy(conn(engine))
    assert [(r.kind, r.entity_id, r.pid, r.epoch) for r in queries.runs(conn(engine))] == [
        ("job", "j1", 42, 0)
    ]
    assert queries.runs_before_epoch(conn(engine), 1) == 1
    assert queries.session_runs(conn(engine)) == []
    engine.handle(pausing.SuspendJob(job_id="j1", reason="run cut off"))
    assert queries.resumable_jobs(conn(engine), cut_off="run cut off") == ["j1"]
    # Suspended for another reason (a paused run cut off, a lost run): it waits for a continue.
    assert queries.resumable_jobs(conn(engine), cut_off="paused run cut off") == []
    engine.handle(c.AcceptJob(job_id="j2", session_id="s", owed=False))
    engine.handle(c.StartJob(job_id="j2", run_id="run2"))
    engine.handle(c.FinishJob(job_id="j2", outcome="ok", result="done"))
    engine.handle(c.RecordNotifyStarted(job_id="j2", pid=9))
    assert [(n.job_id, n.notify_pid) for n in queries.pending_notifies(conn(engine))] == [("j2", 9)]
    assert queries.lost_notifies(conn(engine)) == 0
    engine.handle(c.RecordNotifyLost(job_id="j2", pid=9, reason="cut off"))
    assert queries.pending_notifies(conn(engine)) == []
    assert queries.lost_notifies(conn(engine)) == 1
    lost, fine = queries.job(conn(engine), "j2"), queries.job(conn(engine), "j1")
    assert lost is not None and lost.notify_lost and fine is not None and not fine.notify_lost
    assert queries.last_job_update(conn(engine)) is not None
    assert queries.log_head(conn(engine)) == engine.log.head()
    counts = {(s.kind, s.state): s.count for s in queries.stream_counts(conn(engine))}
    assert counts[("job", "suspended")] == 1 and counts[("job", "ok")] == 1


def test_queries_controlled_sessions_in_transition(engine: Any) -> None:
    engine.handle(c.CreateSession(session_id="ctl", has_controller=True))
    engine.handle(c.CreateSession(session_id="plain", start_run_id="r"))
    found = queries.controlled_sessions_in_transition(conn(engine))
    assert [(s.session_id, s.state, s.run_id) for s in found] == [("ctl", "starting", None)]
    engine.handle(c.StartSession(session_id="ctl", run_id="r1", pid=5, start_token="t5"))
    controller = queries.session_controller(conn(engine), "ctl")
    assert controller is not None and (controller.pid, controller.start_token) == (5, "t5")
    assert controller.has_controller
    plain = queries.session_controller(conn(engine), "plain")
    assert plain is not None and not plain.has_controller
    assert queries.session_controller(conn(engine), "nobody") is None


def test_queries_tasks_last_updated_first_and_counted(engine: Any, clock: FixedClock) -> None:
    for session in ("s", "s2", "s3"):  # a session owes one task at a time
        engine.handle(c.CreateSession(session_id=session, start_run_id=f"r-{session}"))
    engine.handle(c.CreateTask(task_id="t1", session_id="s", message_id="m1", text="hi"))
    engine.handle(c.CreateTask(task_id="t2", session_id="s2", message_id="m2"))
    engine.handle(c.CreateTask(task_id="t3", session_id="s3", message_id="m3"))
    started = format_time(clock.now())
    clock.advance(1)
    engine.handle(c.CancelTask(task_id="t1", text="no"))  # the oldest, updated last
    assert queries.count_tasks(conn(engine), "s", None) == 1
    assert queries.count_tasks(conn(engine), None, "canceled") == 1
    assert queries.count_tasks(conn(engine), None, None, started) == 1
    page = queries.tasks_last_updated_first(conn(engine), None, None, None, None, 2)
    # t1 by its update; then one clock instant, where the id breaks the tie, largest first.
    assert [t.task_id for t in page] == ["t1", "t3"]
    below = (page[-1].updated_at, page[-1].task_id)
    rest = queries.tasks_last_updated_first(conn(engine), None, None, None, below, 10)
    assert [t.task_id for t in rest] == ["t2"]
    since = queries.tasks_last_updated_first(conn(engine), None, None, started, None, 10)
    assert [t.task_id for t in since] == ["t1"]
    task = queries.task(conn(engine), "t1")
    assert task is not None and (task.state, task.status_text, task.text) == (
        "canceled",
        "no",
        "hi",
    )


def test_queries_built_rows_equal_msgspec_converted_rows(engine: Any) -> None:
    """The entities' rows are built by generated code for speed: they must equal what msgspec's
    validating conversion makes of the same selected values (flags, JSON, NULLs included)."""
    engine.handle(c.CreateSession(session_id="s1", has_controller=True))
    engine.handle(c.TaintSession(session_id="s1", reason="looked odd"))
    engine.handle(c.CreateSession(session_id="s", start_run_id="r"))
    engine.handle(c.AcceptJob(job_id="j1", session_id="s", owed=False))
    engine.handle(c.StartJob(job_id="j1", run_id="run1", pid=42, start_token="tok", epoch=0))
    engine.handle(c.FinishJob(job_id="j1", outcome="ok", result="done"))
    engine.handle(c.RecordNotifyStarted(job_id="j1", pid=9))
    engine.handle(c.RecordNotifyLost(job_id="j1", pid=9, reason="cut off"))
    engine.handle(c.AcceptJob(job_id="j2", session_id="s", owed=False))
    engine.handle(c.CreateTask(task_id="t1", session_id="s", message_id="m1", text="hi"))
    engine.handle(c.AcquireLease(holder="me", host="h", pid=7))
    for row_type in (LeaseRow, SessionRow, JobRow, TaskRow):
        selected = conn(engine).execute(rows._select_sql(row_type, "")).fetchall()
        assert selected, row_type
        built = rows._building_reader(row_type)
        assert built is not None, row_type
        converted = rows._converting_reader(row_type)
        # Compared as JSON, where a flag read as 1 would show (``1 == True`` in Python).
        as_json = msgspec.json.encode
        assert [as_json(built(r)) for r in selected] == [as_json(converted(r)) for r in selected]
