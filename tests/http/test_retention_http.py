"""Retention over HTTP (ADR 0062): a retired job, task or session answers 410 with when and why,
not 404, and the ``/invocations`` key that made a job stays answered: a repeat starts nothing."""

from __future__ import annotations

from engine import FixedClock
from engine.domain import commands as c
from projections.retention import retire
from tests.http.conftest import MakeClient, sql
from tests.http.test_agentcore_contract import post
from tests.support import runners


def test_retired_job_answers_410_with_when_and_its_key_stays_answered(
    make_client: MakeClient,
) -> None:
    client, runtime = make_client(runners.ECHO, clock=FixedClock())
    first = post(client, {"prompt": "one", "id": "same"}).json
    job_id = first["invocation"]
    [done] = retire(runtime.engine.log, {"job": "30d"}, dry_run=False)
    assert [j.entity_id for j in done.entities] == [job_id]
    gone = client.simulate_get(f"/v1/jobs/{job_id}")
    assert gone.status_code == 410, gone.text
    error = gone.json["error"]
    assert error["code"] == "retired" and error["retired_at"] and error["ended_at"]
    assert client.simulate_get("/v1/jobs/never-was").status_code == 404
    again = post(client, {"prompt": "two", "id": "same"})
    assert sql(runtime, "SELECT count(*) FROM jobs")[0][0] == 0  # no new job for a known key
    assert again.status_code == 410, again.text
    assert again.json["invocation"] == job_id and again.json["retired_at"]
    fetched = post(client, {"get": "same"})
    assert fetched.status_code == 410 and fetched.json["invocation"] == job_id


def test_retired_session_and_task_answer_410_by_the_same_policy_table(
    make_client: MakeClient,
) -> None:
    client, runtime = make_client(runners.ECHO, clock=FixedClock())
    engine = runtime.engine
    engine.handle(c.CreateSession(session_id="s9", start_run_id="r9"))
    engine.handle(c.CreateTask(task_id="t9", session_id="s9", message_id="m9", text="hi"))
    engine.handle(c.CompleteTask(task_id="t9", result="done"))
    engine.handle(c.FinishSession(session_id="s9"))
    assert client.simulate_get("/v1/tasks/t9").status_code == 200
    done = retire(engine.log, {"task": "30d", "session": "30d"}, dry_run=False)
    assert [[e.entity_id for e in d.entities] for d in done] == [["t9"], ["s9"]]
    for path, kind in (("/v1/tasks/t9", "task"), ("/v1/sessions/s9", "session")):
        gone = client.simulate_get(path)
        assert gone.status_code == 410, gone.text
        error = gone.json["error"]
        assert error["code"] == "retired" and error["retired_at"] and error["ended_at"]
        assert (
            error["message"].startswith(f"{kind} ")
            and "ended more than 30d ago" in error["message"]
        )
    assert client.simulate_get("/v1/tasks/never-was").status_code == 404
    assert client.simulate_get("/v1/sessions/never-was").status_code == 404
