"""Retention over HTTP (ADR 0062): a retired job answers 410 with when and why, not 404, and
the ``/invocations`` key that made it stays answered: a repeat starts nothing."""

from __future__ import annotations

from engine import FixedClock
from projections.retention import retire_jobs
from tests.http.conftest import MakeClient, sql
from tests.http.test_agentcore_contract import post
from tests.support import runners


def test_retired_job_answers_410_with_when_and_its_key_stays_answered(
    make_client: MakeClient,
) -> None:
    client, runtime = make_client(runners.ECHO, clock=FixedClock())
    first = post(client, {"prompt": "one", "id": "same"}).json
    job_id = first["invocation"]
    done = retire_jobs(runtime.engine.log, "30d", dry_run=False)
    assert [j.job_id for j in done.jobs] == [job_id]
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
