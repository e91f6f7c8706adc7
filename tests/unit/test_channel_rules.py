"""A run's live channel (issue 29, ADR 0038) through the command API, on a real log file and on
PostgreSQL (the channel's read model is SQLite's SQL run through the dialect): a
control is recorded only for a running job whose run takes input, within its limits and guard;
its delivery and loss are recorded once; what the run says moves its turn, its questions and
its A2A task."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine.domain import channel as ch
from engine.domain import commands as c
from engine.domain import pausing
from engine.domain.errors import (
    Conflict,
    Forbidden,
    NoChannel,
    StaleTurn,
    Unauthorized,
    UnknownRequest,
)
from engine.engine import Engine
from engine.errors import InvalidArgument
from projections import open_engine, queries
from tests.support.backends import log_target
from tests.unit.test_rules import refused, session


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    opened = open_engine(log_target(request.param, tmp_path))
    yield opened
    opened.log.close()


BIG = "x" * 65_536  # a response of more than 64 KiB once it is JSON


def running(engine: Engine, jid: str = "j1", input: str = "lines", **accept: Any) -> None:
    engine.handle(c.AcceptJob(job_id=jid, session_id="s1", owed=False, **accept))
    engine.handle(c.StartJob(job_id=jid, run_id=f"run-{jid}", input=input))  # type: ignore[arg-type]


def send(engine: Engine, action: str, jid: str = "j1", **kw: Any) -> int:
    return engine.handle(ch.SendControl(job_id=jid, action=action, **kw)).first_position  # type: ignore[arg-type]


def said(engine: Engine, signal: str, jid: str = "j1", **kw: Any) -> None:
    engine.handle(ch.RecordRunSignal(job_id=jid, run_id=f"run-{jid}", signal=signal, **kw))  # type: ignore[arg-type]


def job(engine: Engine, jid: str = "j1") -> Any:
    return queries.job(engine.log.connection(), jid)


def states(engine: Engine, jid: str = "j1") -> dict[int, str]:
    return {r.control: r.state for r in queries.controls(engine.log.connection(), jid)}


def test_channel_control_needs_a_running_job_whose_run_takes_input(engine: Engine) -> None:
    session(engine)
    running(engine, "plain", input="")
    error = refused(engine, ch.SendControl(job_id="plain", action="finalize"), NoChannel)
    assert "runs without input" in str(error)
    engine.handle(c.AcceptJob(job_id="queued", session_id="s1", owed=False))
    assert "is queued" in str(
        refused(engine, ch.SendControl(job_id="queued", action="finalize"), NoChannel)
    )
    running(engine)
    engine.handle(pausing.PauseJob(job_id="j1"))
    refused(engine, ch.SendControl(job_id="j1", action="finalize"), NoChannel)


def test_channel_steer_and_interrupt_are_guarded_by_the_active_turn(engine: Engine) -> None:
    session(engine)
    running(engine)
    steer = ch.SendControl(job_id="j1", action="steer", text="faster", turn="t1")
    assert "no turn is active" in str(refused(engine, steer, StaleTurn))
    said(engine, "turn_started", turn="t1")
    assert job(engine).turn == "t1"
    stale = ch.SendControl(job_id="j1", action="interrupt", turn="t0")
    assert "turn 't1' is active" in str(refused(engine, stale, StaleTurn))
    sent = send(engine, "steer", text="faster", turn="t1")
    assert states(engine) == {sent: "pending"}
    body = json.loads(queries.pending_controls(engine.log.connection(), "j1")[0].body)
    assert body == {"id": sent, "type": "steer", "text": "faster", "turn": "t1"}
    said(engine, "turn_ended", turn="t1")
    assert job(engine).turn is None
    with pytest.raises(StaleTurn):  # only the active turn ends
        said(engine, "turn_ended", turn="t1")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"action": "steer", "text": "x" * 20_001, "turn": "t1"}, "1 to 20000"),
        ({"action": "steer", "text": "", "turn": "t1"}, "1 to 20000"),
        ({"action": "finalize", "text": "x" * 20_001}, "1 to 20000"),
        ({"action": "effort", "effort": "extreme"}, "effort must be one of"),
        ({"action": "interrupt", "turn": "t1", "text": "why"}, "takes no text"),
        ({"action": "respond", "request": "q1", "response": "[1]"}, "a JSON object"),
        ({"action": "respond", "request": "q1", "response": json.dumps({"a": BIG})}, "at most"),
    ],
)  # fmt: skip
def test_channel_limits_refuse_and_record_nothing(
    engine: Engine, fields: dict[str, Any], message: str
) -> None:
    session(engine)
    running(engine)
    said(engine, "turn_started", turn="t1")
    said(engine, "input_required", request="q1", question="which?")
    error = refused(engine, ch.SendControl(job_id="j1", **fields), InvalidArgument)
    assert message in str(error)


def test_channel_finalize_without_text_asks_for_the_final_answer(engine: Engine) -> None:
    session(engine)
    running(engine)
    send(engine, "finalize")
    body = json.loads(queries.pending_controls(engine.log.connection(), "j1")[0].body)
    assert body["text"] == ch.FINALIZE_TEXT


def test_channel_delivery_is_recorded_once_and_only_for_the_current_run(engine: Engine) -> None:
    session(engine)
    running(engine)
    first = send(engine, "effort", effort="high")
    wrong = ch.RecordControlDelivered(job_id="j1", control=first, run_id="run-other")
    refused(engine, wrong, Conflict)
    engine.handle(ch.RecordControlDelivered(job_id="j1", control=first, run_id="run-j1"))
    assert states(engine) == {first: "delivered"}
    again = ch.RecordControlDelivered(job_id="j1", control=first, run_id="run-j1")
    assert "is delivered, not pending" in str(refused(engine, again, Conflict))
    refused(engine, ch.RecordControlLost(job_id="j1", control=first), Conflict)
    refused(engine, ch.RecordControlDelivered(job_id="j1", control=9999, run_id="run-j1"), Conflict)


def test_channel_controls_pending_at_the_end_of_a_job_are_lost(engine: Engine) -> None:
    session(engine)
    running(engine)
    delivered, closed, left = (send(engine, "message", text=t) for t in ("a", "b", "c"))
    engine.handle(ch.RecordControlDelivered(job_id="j1", control=delivered, run_id="run-j1"))
    engine.handle(ch.RecordControlLost(job_id="j1", control=closed, reason="input closed"))
    engine.handle(c.FinishJob(job_id="j1", outcome="ok"))
    rows = {r.control: r for r in queries.controls(engine.log.connection(), "j1")}
    assert {k: r.state for k, r in rows.items()} == {
        delivered: "delivered",
        closed: "lost",
        left: "lost",
    }
    assert (rows[closed].reason, rows[left].reason) == ("input closed", "job ok")
    assert queries.control_counts(engine.log.connection()) == {
        "pending": 0,
        "delivered": 1,
        "lost": 2,
    }


def test_channel_a_question_is_answered_once_and_its_task_works_again(engine: Engine) -> None:
    session(engine)
    engine.handle(c.CreateTask(task_id="t1", session_id="s1"))
    running(engine, task_id="t1")
    said(engine, "input_required", request="q1", question="Which colour?")
    task = queries.task(engine.log.connection(), "t1")
    assert task is not None and (task.state, task.status_text) == (
        "input-required",
        "Which colour?",
    )
    assert job(engine).pending_requests == 1
    refused(
        engine,
        ch.SendControl(job_id="j1", action="respond", request="q2", response="{}"),
        UnknownRequest,
    )
    answer = send(engine, "respond", request="q1", response='{"text": "blue"}')
    assert job(engine).pending_requests == 0
    task = queries.task(engine.log.connection(), "t1")
    assert task is not None and task.state == "working"
    [asked] = queries.requests(engine.log.connection(), "j1")
    assert (asked.state, asked.answer) == ("answered", answer)
    again = ch.SendControl(job_id="j1", action="respond", request="q1", response="{}")
    refused(engine, again, UnknownRequest)


def test_channel_a_follow_up_is_delivered_into_the_run_not_a_new_one(engine: Engine) -> None:
    session(engine)
    engine.handle(c.CreateTask(task_id="t1", session_id="s1"))
    running(engine, task_id="t1")
    said(engine, "turn_started", turn="t1")
    engine.handle(
        c.DeliverTaskMessage(task_id="t1", message_id="m2", text="also tests", interrupt=True)
    )
    pending = queries.pending_controls(engine.log.connection(), "j1")
    assert [json.loads(p.body)["type"] for p in pending] == ["interrupt", "message"]
    assert {p.sent_by for p in pending} == {"a2a:t1"}
    assert job(engine).state == "running"  # no supersede
    said(engine, "input_required", request="q1", question="which?")
    engine.handle(c.DeliverTaskMessage(task_id="t1", message_id="m3", text="blue"))
    last = queries.pending_controls(engine.log.connection(), "j1")[-1]
    assert json.loads(last.body)["response"] == {"text": "blue"}
    session(engine, "s2")
    engine.handle(c.CreateTask(task_id="t2", session_id="s2"))
    engine.handle(c.AcceptJob(job_id="plain", session_id="s2", task_id="t2", owed=False))
    engine.handle(c.StartJob(job_id="plain", run_id="run-plain"))
    refused(engine, c.DeliverTaskMessage(task_id="t2", text="x"), NoChannel)


def test_channel_progress_and_signals_of_another_run_are_refused(engine: Engine) -> None:
    session(engine)
    running(engine)
    said(engine, "progress", text="half way")
    other = ch.RecordRunSignal(job_id="j1", run_id="run-old", signal="progress", text="x")
    refused(engine, other, Conflict)
    refused(
        engine, ch.RecordRunSignal(job_id="j1", run_id="run-j1", signal="progress"), InvalidArgument
    )


def test_channel_an_ancestors_live_run_may_send_a_control_and_no_other_run(
    engine: Engine,
) -> None:
    session(engine)
    digest = "d" * 64
    for jid, parent in (("root", None), ("other", None)):
        engine.handle(c.AcceptJob(job_id=jid, session_id="s1", owed=False, parent_job=parent))
        engine.handle(c.StartJob(job_id=jid, run_id=f"run-{jid}", token_digest=digest))
    running(engine, "child", parent_job="root")
    by_root = ch.SendControl(
        job_id="child", action="finalize", caller_job="root", caller_token_digest=digest
    )
    engine.handle(by_root)
    [sent] = queries.controls(engine.log.connection(), "child")
    assert sent.sent_by == "root"
    by_other = msgspec.structs.replace(by_root, caller_job="other")
    assert "not an ancestor" in str(refused(engine, by_other, Forbidden))
    stale = msgspec.structs.replace(by_root, caller_token_digest="e" * 64)
    refused(engine, stale, Unauthorized)


def test_channel_a_next_run_drops_the_questions_and_turn_bound_controls_of_the_last(
    engine: Engine,
) -> None:
    session(engine)
    running(engine)
    said(engine, "turn_started", turn="t1")
    said(engine, "input_required", request="q1", question="which?")
    sent = {
        action: send(engine, action, **fields)
        for action, fields in {
            "steer": {"text": "faster", "turn": "t1"},
            "respond": {"request": "q1", "response": "{}"},
            "message": {"text": "also tests"},
            "effort": {"effort": "low"},
        }.items()
    }
    engine.handle(pausing.SuspendJob(job_id="j1", reason="its server died"))
    engine.handle(c.StartJob(job_id="j1", run_id="run-j1b", resumed=True, input="lines"))
    now = states(engine)
    assert [now[sent[a]] for a in ("steer", "respond", "message", "effort")] == [
        "lost",
        "lost",
        "pending",
        "pending",
    ]
    assert job(engine).turn is None and job(engine).pending_requests == 0
    [asked] = queries.requests(engine.log.connection(), "j1")
    assert asked.state == "answered"  # answered before the run ended; nothing left to drop


def test_channel_a_response_nested_deeper_than_its_limit_is_refused(engine: Engine) -> None:
    session(engine)
    running(engine)
    said(engine, "input_required", request="q1", question="which?")
    deep = '{"a": ' * 33 + "1" + "}" * 33
    cmd = ch.SendControl(job_id="j1", action="respond", request="q1", response=deep)
    assert "32 levels" in str(refused(engine, cmd, InvalidArgument))
    braces_in_text = json.dumps({"text": "[[[[{{{{" * 10})  # inside a string: no nesting
    send(engine, "respond", request="q1", response=braces_in_text)


def test_channel_an_a2a_answer_to_one_of_two_questions_leaves_the_task_waiting(
    engine: Engine,
) -> None:
    session(engine)
    engine.handle(c.CreateTask(task_id="t1", session_id="s1"))
    running(engine, task_id="t1")
    said(engine, "input_required", request="q1", question="Which colour?")
    said(engine, "input_required", request="q2", question="Which size?")
    engine.handle(c.DeliverTaskMessage(task_id="t1", message_id="m2", text="blue"))
    task = queries.task(engine.log.connection(), "t1")
    assert task is not None and (task.state, task.status_text) == ("input-required", "Which size?")
    engine.handle(c.DeliverTaskMessage(task_id="t1", message_id="m3", text="large"))
    task = queries.task(engine.log.connection(), "t1")
    assert task is not None and task.state == "working"
    answers = [json.loads(p.body) for p in queries.pending_controls(engine.log.connection(), "j1")]
    assert [(a["request"], a["response"]) for a in answers] == [
        ("q1", {"text": "blue"}),
        ("q2", {"text": "large"}),
    ]
