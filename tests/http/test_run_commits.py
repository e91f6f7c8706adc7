"""How many commits a sync invocation costs: the run's last output and its finish share one
(ADR 0027), so a sync caller waits for one sync and one wake-up less."""

from __future__ import annotations

from tests.http.conftest import MakeClient, sql


def test_runner_records_the_last_output_and_the_finish_in_one_commit(
    make_client: MakeClient,
) -> None:
    client, runtime = make_client(runner="cat")
    client.simulate_post("/invocations", json={"prompt": "warm up"})  # opens the log
    stats = runtime.engine.log.stats
    commits, events = stats.commits, stats.events
    answer = client.simulate_post("/invocations", json={"prompt": "hello"})
    assert answer.status_code == 200 and answer.json["result"] == "hello"
    job = f"job:{answer.json['invocation']}"
    types = [
        row[0]
        for row in sql(
            runtime, "SELECT event_type FROM events WHERE stream_id = ? ORDER BY position", job
        )
    ]
    assert types == ["job.accepted", "job.started", "job.output", "job.finished"]
    # The session's three events, accepted and started: one commit. The output, the finish
    # and the session's settle: the other.
    assert (stats.commits - commits, stats.events - events) == (2, 8)
