"""Traces over OTLP/HTTP (issue 48, ADR 0059) from a real gunicorn to a real receiver on
loopback that decodes the protobuf wire format: a caller's ``traceparent`` parents the
request, job, run and notify spans, the run gets it in its environment, a push delivery
sends it, the log lines carry the ids, and without the OTLP variables nothing goes out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.otlp import Got, otel_env, otlp_receiver
from tests.support.receiver import receiver
from tests.support.server import read_until, serve

pytestmark = pytest.mark.server

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
HEADERS = {
    "Content-Type": "application/json",
    "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
    "tracestate": "vendor=opaque",
    "baggage": "tenant=acme",
}
# The run prints what it was given; the hook only reads its input.
RUNNER = 'read -r p; echo "tp=$TRACEPARENT ts=$TRACESTATE bg=$BAGGAGE"'
ENV = {"FOLDLINE_RUNNER": RUNNER, "FOLDLINE_NOTIFY": "cat >/dev/null"}


def _one(spans: list[Got], name: str) -> Got:
    named = [got for got in spans if got.name == name]
    assert len(named) == 1, "\n".join(got.line() for got in spans)
    return named[0]


def _have(*names: str):  # type: ignore[no-untyped-def]
    return lambda spans: set(names) <= {got.name for got in spans}


def test_tracing_one_invocation_is_one_trace_under_the_callers_span(tmp_path: Path) -> None:
    with otlp_receiver() as otlp:
        env = {**ENV, **otel_env(otlp), "FOLDLINE_LOG_LEVEL": "info"}
        with serve(tmp_path, env) as server:
            status, _, raw = server.request("POST", "/invocations", {"prompt": "hi"}, HEADERS)
            assert status == 200, raw
            answer = json.loads(raw)
            spans = otlp.wait_for(_have("POST /invocations", "job", "run", "notify"), "job spans")
            lines = read_until(server, '"logger": "foldline.tenure"')
    request, job = _one(spans, "POST /invocations"), _one(spans, "job")
    run, notify = _one(spans, "run"), _one(spans, "notify")
    print(*(got.line() for got in spans), sep="\n")
    assert {got.trace_id for got in (request, job, run, notify)} == {CALLER_TRACE}
    assert request.parent_id == CALLER_SPAN and request.kind == 2  # SERVER
    assert job.parent_id == request.span_id
    assert run.parent_id == job.span_id and notify.parent_id == job.span_id
    # The run got its own span as TRACEPARENT, and the caller's state and baggage.
    assert (
        answer["result"]
        == f"tp=00-{CALLER_TRACE}-{run.span_id}-01 ts=vendor=opaque bg=tenant=acme\n"
    )
    assert job.attributes["foldline.job"] == answer["invocation"]
    assert job.attributes["foldline.session"] == answer["session"]
    assert job.attributes["foldline.outcome"] == "ok" == run.attributes["foldline.outcome"]
    assert run.attributes["process.exit.code"] == 0 and run.attributes["process.pid"] > 0
    started, finished = run.attributes["foldline.positions"]
    assert job.attributes["foldline.positions"][1] == finished > started
    assert len(notify.attributes["foldline.positions"]) == 2  # its start and its finish
    assert request.attributes["http.route"] == "/invocations"
    assert job.resource["service.name"] == "foldline"
    assert job.resource["deployment.environment"] == "test"  # OTEL_RESOURCE_ATTRIBUTES
    # The log is JSON lines; a line said inside a span carries its ids.
    lease = next(json.loads(line) for line in lines.splitlines() if "foldline.tenure" in line)
    assert lease["level"] == "info" and lease["message"].startswith("workspace lease acquired")
    assert lease["trace_id"] == CALLER_TRACE and lease["span_id"] == request.span_id


def test_tracing_a_push_delivery_sends_traceparent(tmp_path: Path) -> None:
    env = {
        "FOLDLINE_RUNNER": "read -r p; echo done",
        "FOLDLINE_PUSH_ALLOW": "127.0.0.1",
    }
    with (
        otlp_receiver() as otlp,
        receiver() as hook,
        serve(tmp_path, {**env, **otel_env(otlp)}) as server,
    ):
        message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}
        params = {
            "message": message,
            "configuration": {"taskPushNotificationConfig": {"url": hook.url}},
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        status, _, raw = server.request("POST", "/", body, HEADERS)
        assert status == 200 and "result" in json.loads(raw), raw
        delivered = hook.wait_for(1)[0]
        spans = otlp.wait_for(_have("push", "job"), "the push span")
    push = next(got for got in spans if got.name == "push")
    print(*(got.line() for got in spans), sep="\n")
    assert delivered.headers["traceparent"] == f"00-{CALLER_TRACE}-{push.span_id}-01"
    assert delivered.headers["tracestate"] == "vendor=opaque"
    assert push.trace_id == CALLER_TRACE and push.kind == 3  # CLIENT
    assert push.parent_id in {got.span_id for got in spans if got.name == "job"}
    assert push.attributes["http.response.status_code"] == 200
    assert push.attributes["foldline.outcome"] == "delivered"


def test_tracing_nothing_is_exported_without_the_otlp_variables(tmp_path: Path) -> None:
    with otlp_receiver() as otlp:
        # The receiver is there, but no variable names it: the server must not look for one.
        with serve(tmp_path, {**ENV, "OTEL_BSP_SCHEDULE_DELAY": "50"}) as server:
            status, _, raw = server.request("POST", "/invocations", {"prompt": "hi"}, HEADERS)
            assert status == 200
            assert json.loads(raw)["result"] == "tp= ts= bg=\n"  # no context handed on
        # The server stopped gracefully: an exporter would have flushed by now.
        assert otlp.requests == 0 and otlp.spans == []
