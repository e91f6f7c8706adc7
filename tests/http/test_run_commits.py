"""How many commits a sync invocation costs: the run's last output and its finish share one
(ADR 0027), so a sync caller waits for one sync and one wake-up less."""

from __future__ import annotations

from tests.http.conftest import MakeClient, sql


def test_runner_records_the_last_output_and_the_finish_in_one_commit(
    make_client: MakeClient,
) -> None:
    client, runtime = make_client(runner="cat")
    client.simulate_post("/invocations", json={"prompt": "warm up"})  # opens the log
    (start,) = sql(runtime, "SELECT max(position) FROM events")[0]
    answer = client.simulate_post("/invocations", json={"prompt": "hello"})
    assert answer.status_code == 200 and answer.json["result"] == "hello"
    streams = (f"session:{answer.json['session']}", f"job:{answer.json['invocation']}")
    rows = sql(
        runtime,
        "SELECT stream_id, event_type, recorded_at FROM events WHERE position > ?"
        " ORDER BY position",
        start,
    )
    # One transaction stamps all its events with one recorded time, so the times of this
    # invocation's events tell its commits apart. The process-wide commit counter would also
    # count writes of the background threads (the lease renewal, for one).
    commits: dict[str, list[str]] = {}
    for stream_id, event_type, recorded_at in rows:
        if stream_id in streams:
            commits.setdefault(recorded_at, []).append(event_type)
    assert list(commits.values()) == [
        ["session.created", "session.started", "session.owes", "job.accepted", "job.started"],
        ["job.output", "job.finished", "session.settled"],
    ], rows
