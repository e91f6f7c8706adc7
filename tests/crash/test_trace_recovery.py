"""kill -9 of a whole server mid-run (issue 48, ADR 0059): the next server's recovery resumes
the job from the trace context its log recorded, so the resumed run is in the caller's trace,
under the same job span, linked to the cut-off run's span (sent by the new server with the
ids the log kept), and the job's span covers both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.settings.config import LEASE_BUSY_TEXT
from tests.crash.test_server_recovery import kill_everything
from tests.support.otlp import Got, otel_env, otlp_receiver
from tests.support.server import RECOVERY_ENV, poll_invocation, serve

pytestmark = [pytest.mark.crash, pytest.mark.server, pytest.mark.slow]

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = "00f067aa0ba902b7"
RUNNER = 'read -r p; echo "tp=$TRACEPARENT"; case "$p" in slow*) sleep 3;; esac'


def test_trace_a_run_resumed_after_kill_9_continues_the_jobs_trace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    headers = {"Content-Type": "application/json", "traceparent": f"00-{TRACE}-{CALLER}-01"}
    with otlp_receiver() as otlp:
        env = {**RECOVERY_ENV, "FOLDLINE_RUNNER": RUNNER, **otel_env(otlp)}
        with serve(workspace, env, workers=2) as first:
            body = {"prompt": "slow work", "id": "k1", "async": True}
            status, _, raw = first.request("POST", "/invocations", body, headers)
            assert status == 200, raw
            job_id = json.loads(raw)["invocation"]
            # The request's span left before the kill (its batch is sent within 50 ms).
            otlp.wait_for(lambda spans: any(s.name == "POST /invocations" for s in spans), "POST")
            with serve(workspace, env) as second:
                status, _, raw = second.request("POST", "/invocations", {"prompt": "mine?"})
                assert status == 503 and LEASE_BUSY_TEXT in raw.decode()
                kill_everything(first)
                result = poll_invocation(second, "k1", "ok")["result"]
                spans = otlp.wait_for(
                    lambda spans: len(_of_job(spans, job_id)) >= 3, "job and two run spans"
                )
    print(*(got.line() for got in spans), sep="\n")
    request = next(s for s in spans if s.name == "POST /invocations" and s.parent_id == CALLER)
    job = next(s for s in _of_job(spans, job_id) if s.name == "job")
    cut, resumed = sorted(
        (s for s in _of_job(spans, job_id) if s.name == "run"),
        key=lambda s: s.attributes.get("foldline.resumed", False),
    )
    assert {request.trace_id, job.trace_id, cut.trace_id, resumed.trace_id} == {TRACE}
    assert job.parent_id == request.span_id
    assert cut.parent_id == job.span_id == resumed.parent_id
    assert resumed.links == ((TRACE, cut.span_id),)
    assert cut.attributes["foldline.outcome"] == "cut off" and cut.status == 2  # ERROR
    assert resumed.attributes["foldline.resumed"] is True
    assert resumed.attributes["foldline.outcome"] == "ok" == job.attributes["foldline.outcome"]
    # Each run printed the TRACEPARENT it got: its own span, in the caller's trace.
    assert result == f"tp=00-{TRACE}-{cut.span_id}-01\ntp=00-{TRACE}-{resumed.span_id}-01\n"
    takeover = next(s for s in spans if s.name == "lease.takeover")
    recovery = next(s for s in spans if s.name == "recovery" and s.parent_id == takeover.span_id)
    assert recovery.attributes["foldline.resumed"] == [job_id]


def _of_job(spans: list[Got], job_id: str) -> list[Got]:
    return [s for s in spans if s.attributes.get("foldline.job") == job_id]
