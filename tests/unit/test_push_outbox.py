"""Push notifications (issue 30, ADR 0039) through the command API, on a real log file and on
PostgreSQL: a config owes one delivery per task transition, in the transition's transaction;
each attempt and its outcome is an event; the retry schedule, the dead letters and the claims
follow the source system's policy. The deliverer is driven by hand on an injected clock
against a real receiver on loopback: no sleeps."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.http.a2a.push import payload
from adapters.services.push import Deliverer
from adapters.system.url_policy import UrlPolicy
from engine.clock import FixedClock
from engine.domain import commands as c
from engine.domain import push as p
from engine.domain.errors import Conflict, NotFound, TaskEnded
from engine.engine import Engine
from projections import open_engine, queries
from tests.support.backends import log_target
from tests.support.receiver import receiver
from tests.unit.test_rules import refused, session

ALLOW = UrlPolicy(["127.0.0.1"])


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path, clock: FixedClock) -> Iterator[Engine]:
    opened = open_engine(log_target(request.param, tmp_path), clock=clock)
    yield opened
    opened.log.close()


def task(engine: Engine, url: str = "http://127.0.0.1:9/hook", **config: Any) -> None:
    session(engine)
    engine.handle(c.CreateTask(task_id="t1", session_id="s1", message_id="m1", text="hi"))
    engine.handle(p.SetPushConfig(task_id="t1", config_id="cfg", url=url, **config))


def owed(engine: Engine) -> list[Any]:
    return queries.deliveries(engine.log.connection(), "t1")


def trail(engine: Engine, delivery_id: str) -> list[tuple[str, Any]]:
    events = engine.log.read_stream(f"push:{delivery_id}")
    return [(e.event_type, e.event) for e in events]


def deliverer(engine: Engine, jitter: float = 0.0) -> Deliverer:
    return Deliverer(
        lambda: engine,
        "server-a",
        ALLOW,
        payload,
        stopping=threading.Event(),
        jitter=lambda: jitter,
    )


def test_push_a_transition_owes_each_config_one_delivery_deduplicated_by_event(
    engine: Engine,
) -> None:
    task(engine)
    engine.handle(p.SetPushConfig(task_id="t1", config_id="second", url="https://example.org/h"))
    assert owed(engine) == []  # made in submitted: nothing happened since
    working = engine.handle(c.UpdateTaskStatus(task_id="t1")).first_position
    engine.handle(c.UpdateTaskStatus(task_id="t1", text="still at it"))  # no new state
    done = engine.handle(c.CompleteTask(task_id="t1", result="42")).first_position
    rows = owed(engine)
    assert [(r.cause, r.config_id, r.task_state, r.progress) for r in rows] == [
        (working, "cfg", "working", "queued"),
        (working, "second", "working", "queued"),
        (done, "cfg", "completed", "queued"),
        (done, "second", "completed", "queued"),
    ]
    assert rows[2].status_text == "42"
    assert queries.owed_count(engine.log.connection()) == 4
    # The task's row keeps its version in step with its stream, configs included (If-Match).
    assert (
        queries.task(engine.log.connection(), "t1").version
        == engine.log.stream_head("task:t1").version
    )


def test_push_config_needs_an_open_task_and_delete_needs_the_config(engine: Engine) -> None:
    task(engine)
    refused(engine, p.DeletePushConfig(task_id="t1", config_id="nope"), NotFound)
    engine.handle(p.DeletePushConfig(task_id="t1", config_id="cfg"))
    engine.handle(c.CompleteTask(task_id="t1", result="ok"))
    assert owed(engine) == []  # deleted before: owed nothing
    refused(engine, p.SetPushConfig(task_id="t1", config_id="late", url="http://x/"), TaskEnded)


def test_push_claims_are_exclusive_and_limited_per_holder(
    engine: Engine, clock: FixedClock
) -> None:
    session(engine)
    for n in range(6):
        engine.handle(c.CreateTask(task_id=f"t{n}", session_id="s1", message_id=f"m{n}"))
        engine.handle(p.SetPushConfig(task_id=f"t{n}", config_id="cfg", url="http://x/"))
        engine.handle(c.FailTask(task_id=f"t{n}", text="no"))  # settles the session's pointer
    rows = queries.claimable(engine.log.connection(), "a", "9999", 100)
    assert len(rows) == 6
    for row in rows[:4]:
        engine.handle(p.StartPushAttempt(delivery_id=row.delivery_id, holder="a"))
    refused(engine, p.StartPushAttempt(delivery_id=rows[0].delivery_id, holder="a"), Conflict)
    refused(engine, p.StartPushAttempt(delivery_id=rows[4].delivery_id, holder="a"), Conflict)
    # Another server (the next holder after a kill) takes a claim over at once.
    engine.handle(p.StartPushAttempt(delivery_id=rows[0].delivery_id, holder="b"))
    refused(
        engine,
        p.RecordPushOutcome(delivery_id=rows[0].delivery_id, attempt=1, holder="a", status=200),
        Conflict,
    )
    clock.advance(p.TIMEOUT_S + p.CLAIM_MARGIN_S)  # the claims run out
    engine.handle(p.StartPushAttempt(delivery_id=rows[4].delivery_id, holder="a"))
    engine.handle(p.StartPushAttempt(delivery_id=rows[1].delivery_id, holder="a"))


def test_push_outcomes_follow_the_policy(engine: Engine, clock: FixedClock) -> None:
    task(engine)
    engine.handle(c.UpdateTaskStatus(task_id="t1"))
    (row,) = owed(engine)
    d = row.delivery_id

    def attempt(status: int, n: int, jitter: float = 0.0, refused: bool = False) -> str:
        engine.handle(p.StartPushAttempt(delivery_id=d, holder="a"))
        engine.handle(
            p.RecordPushOutcome(
                delivery_id=d,
                attempt=n,
                holder="a",
                status=status,
                jitter=jitter,
                refused=refused,
            )
        )
        return owed(engine)[0].progress

    assert attempt(503, 1, jitter=0.2) == "waiting"
    waiting = owed(engine)[0]
    assert waiting.due_at == "2026-01-01T00:00:06.000000Z"  # 5 s + 20 %
    refused(engine, p.StartPushAttempt(delivery_id=d, holder="a"), Conflict)  # not due yet
    clock.advance(6)
    assert attempt(0, 2, jitter=-0.2) == "waiting"  # no answer: 10 s - 20 %
    assert owed(engine)[0].due_at == "2026-01-01T00:00:14.000000Z"
    clock.advance(8)
    for n in range(3, p.MAX_ATTEMPTS):  # 408 and 429 are retried, as 5xx are
        assert attempt(408 if n % 2 else 429, n) == "waiting"
        clock.advance(p.retry_delay_s(n, 0.0))
    assert p.retry_delay_s(9, 0.0) == p.MAX_DELAY_S  # capped at 10 min
    assert attempt(500, p.MAX_ATTEMPTS) == "dead"  # the tenth: 30 min in, not an hour
    kinds = [kind for kind, _ in trail(engine, d)]
    assert kinds.count("push.attempt_started") == p.MAX_ATTEMPTS
    assert kinds[-1] == "push.dead" and "10 attempts" in trail(engine, d)[-1][1].reason


def test_push_a_final_4xx_or_a_refused_url_is_dead_at_once(engine: Engine) -> None:
    task(engine)
    engine.handle(p.SetPushConfig(task_id="t1", config_id="other", url="http://x/"))
    engine.handle(c.UpdateTaskStatus(task_id="t1"))
    first, second = owed(engine)
    for row, outcome in ((first, {"status": 404}), (second, {"refused": True})):
        engine.handle(p.StartPushAttempt(delivery_id=row.delivery_id, holder="a"))
        engine.handle(
            p.RecordPushOutcome(delivery_id=row.delivery_id, attempt=1, holder="a", **outcome)
        )
    assert [r.progress for r in owed(engine)] == ["dead", "dead"]
    assert [r.last_error for r in owed(engine)] == [
        "the receiver answered 404",
        "the URL was refused",
    ]
    assert queries.owed_count(engine.log.connection()) == 0


def test_push_a_waiting_delivery_past_its_age_expires(engine: Engine, clock: FixedClock) -> None:
    task(engine)
    engine.handle(c.UpdateTaskStatus(task_id="t1"))
    (row,) = owed(engine)
    engine.handle(p.StartPushAttempt(delivery_id=row.delivery_id, holder="a"))
    engine.handle(
        p.RecordPushOutcome(delivery_id=row.delivery_id, attempt=1, holder="a", status=503)
    )
    refused(engine, p.ExpirePush(delivery_id=row.delivery_id), Conflict)
    clock.advance(p.MAX_AGE_S)
    engine.handle(p.ExpirePush(delivery_id=row.delivery_id))
    assert owed(engine)[0].progress == "dead"


# -- the deliverer, by hand, against a real receiver -------------------------------------------


def test_push_deliverer_retries_503_twice_then_delivers_on_the_third_try(
    engine: Engine, clock: FixedClock
) -> None:
    with receiver([503, 503]) as hook:
        task(engine, hook.url, token="tok", scheme="Bearer", credentials="sekret")
        engine.handle(c.UpdateTaskStatus(task_id="t1"))
        push = deliverer(engine, jitter=0.2)
        assert push.step(wait=True) == pytest.approx(6.0)  # 5 s x (1 + 20 %)
        assert len(hook.wait_for(1)) == 1
        assert push.step(wait=True) == pytest.approx(6.0)  # not due: nothing sent
        clock.advance(6)
        push.step(wait=True)
        clock.advance(12)
        push.step(wait=True)
        got = hook.wait_for(3)
    print("receiver log (503, 503, then 200):", *hook.log(), sep="\n  ")
    print("headers of the last:", got[2].headers)
    (row,) = owed(engine)
    assert row.progress == "delivered" and row.attempts == 3
    assert {g.headers["x-foldline-event-id"] for g in got} == {row.delivery_id}
    assert got[0].headers["x-a2a-notification-token"] == "tok"
    assert got[0].headers["authorization"] == "Bearer sekret"
    assert got[2].body["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    assert [kind for kind, _ in trail(engine, row.delivery_id)] == [
        "push.attempt_started",
        "push.failed",
        "push.attempt_started",
        "push.failed",
        "push.attempt_started",
        "push.delivered",
    ]


def test_push_deliverer_sends_the_final_task_and_gives_404_up(engine: Engine) -> None:
    with receiver([404]) as dead, receiver() as alive:
        task(engine, dead.url)
        engine.handle(p.SetPushConfig(task_id="t1", config_id="old", url=alive.url, dialect="0.3"))
        engine.handle(c.CompleteTask(task_id="t1", result="the answer"))
        deliverer(engine).step(wait=True)
        (to_dead,) = dead.wait_for(1)
        (to_alive,) = alive.wait_for(1)
    assert to_dead.body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert to_dead.body["task"]["artifacts"][0]["parts"] == [{"text": "the answer"}]
    assert to_alive.body["kind"] == "task" and to_alive.body["status"]["state"] == "completed"
    assert [(r.config_id, r.progress) for r in owed(engine)] == [
        ("cfg", "dead"),
        ("old", "delivered"),
    ]


def test_push_deliverer_refuses_a_loopback_url_at_send_time(engine: Engine) -> None:
    task(engine, "http://127.0.0.1:9/hook")
    engine.handle(c.UpdateTaskStatus(task_id="t1"))
    strict = Deliverer(lambda: engine, "a", UrlPolicy(), payload, stopping=threading.Event())
    strict.step(wait=True)
    (row,) = owed(engine)
    assert row.progress == "dead" and row.last_error == "the URL was refused"


def test_push_deliveries_are_the_task_pages_links_to_their_trails(tmp_path: Path) -> None:
    from projections import console_queries

    engine = open_engine(tmp_path / "log.db")
    try:
        task(engine)
        engine.handle(c.UpdateTaskStatus(task_id="t1"))
        (row,) = owed(engine)
        found = console_queries.entity(engine.log.connection(), "task", "t1")
    finally:
        engine.log.close()
    assert found is not None
    assert [(link.kind, link.id, link.state) for link in found.lineage if link.kind == "push"] == [
        ("push", row.delivery_id, "queued")
    ]


def test_push_a_retry_that_would_fall_past_the_hour_is_not_waited_for(
    engine: Engine, clock: FixedClock
) -> None:
    task(engine)
    engine.handle(c.UpdateTaskStatus(task_id="t1"))
    (row,) = owed(engine)
    engine.handle(p.StartPushAttempt(delivery_id=row.delivery_id, holder="a"))
    clock.advance(p.MAX_AGE_S - 4)  # a 5 s retry would come after the hour
    engine.handle(
        p.RecordPushOutcome(delivery_id=row.delivery_id, attempt=1, holder="a", status=503)
    )
    (row,) = owed(engine)
    assert (row.progress, row.last_error) == (
        "dead",
        "the next try would fall past the maximum age",
    )


def test_push_a_status_tells_the_agents_words_never_the_callers(engine: Engine) -> None:
    task(engine)
    engine.handle(c.RequireTaskInput(task_id="t1", text="which file?"))
    engine.handle(
        c.AddTaskMessage(task_id="t1", message_id="m2", text="my secret answer", superseded_by="")
    )
    engine.handle(c.CompleteTask(task_id="t1", result="done"))
    told = [(r.task_state, r.status_text) for r in owed(engine)]
    assert told == [("input-required", "which file?"), ("working", None), ("completed", "done")]


def test_push_config_secrets_must_be_header_values() -> None:
    import msgspec

    for bad in ("a\r\nX-Evil: 1", "two words", "caf\u00e9"):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(
                {"task_id": "t", "config_id": "c", "url": "http://x/", "token": bad},
                p.SetPushConfig,
            )
