"""Tracing off costs nothing (issue 48, ADR 0059): without the OTLP variables no module of
``opentelemetry`` is imported, by the app, a request, a job or its run; the log level and
the JSON lines; and a ``job.started`` recorded before traces existed still decodes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from adapters.system import logs, tracing
from engine.domain import commands as c
from engine.domain.job import JobStarted

ROOT = Path(__file__).resolve().parents[2]
# The app as the server builds it, one invocation run to its end through the real runner.
PROGRAM = """
import json, sys
from dataclasses import replace
import falcon.testing
import adapters.programs.server  # the gunicorn program, hooks and all
from adapters.http.a2a.push import payload_for
from adapters.http.app import create_app
from adapters.services.runtime import Runtime
from adapters.settings.config import load_config

config = replace(load_config({}, workspace=sys.argv[1]), runner="cat", token="t")
runtime = Runtime(config, "test-holder", push_payload=payload_for(config))
client = falcon.testing.TestClient(create_app(runtime))
caller = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
answer = client.simulate_post("/invocations", json={"prompt": "hi"}, headers=caller)
runtime.close()
loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
print(json.dumps({"status": answer.status_code, "result": answer.json["result"], "loaded": loaded}))
"""


def test_tracing_off_imports_nothing_of_opentelemetry(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["FOLDLINE_STATE_DIR"] = str(tmp_path / "state")
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
        check=True,
    )
    seen = json.loads(done.stdout.decode().splitlines()[-1])
    assert seen == {"status": 200, "result": "hi", "loaded": []}


def test_tracing_is_on_only_with_an_otlp_endpoint() -> None:
    assert not tracing.enabled({})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/t"})
    off = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}
    assert not tracing.enabled(off)


def test_tracing_parts_of_refuses_a_malformed_traceparent() -> None:
    good = f"00-{'a' * 32}-{'b' * 16}-01"
    assert tracing.parts_of(good) == ("a" * 32, "b" * 16, True)
    assert tracing.parts_of(f"00-{'a' * 32}-{'b' * 16}-00") == ("a" * 32, "b" * 16, False)
    for bad in (
        "",
        "00-xyz-abc-01",
        f"00-{'g' * 32}-{'b' * 16}-01",
        f"00-{'a' * 32}-{'b' * 15}-01",
    ):
        assert tracing.parts_of(bad) is None


def test_logs_level_is_info_by_default_and_refuses_an_unknown_one() -> None:
    assert logs.level_name({}) == "info"
    assert logs.level_name({"FOLDLINE_LOG_LEVEL": "DEBUG"}) == "debug"
    with pytest.raises(ValueError, match="FOLDLINE_LOG_LEVEL='loud' is not one of debug"):
        logs.level_name({"FOLDLINE_LOG_LEVEL": "loud"})


def test_logs_a_record_is_one_json_line_without_ids_outside_a_span() -> None:
    record = logging.LogRecord("foldline.x", logging.INFO, __file__, 1, "said %s", ("it",), None)
    line = logs.JsonLines().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["level"] == "info" and parsed["logger"] == "foldline.x"
    assert parsed["message"] == "said it" and parsed["time"].endswith("Z")
    assert "trace_id" not in parsed


def test_job_started_recorded_before_traces_decodes_without_one() -> None:
    old = b'{"type":"job.started","run_id":"run_1","pid":7}'
    assert msgspec.json.decode(old, type=JobStarted).trace is None


def test_start_job_refuses_a_malformed_trace() -> None:
    def start(trace: dict[str, str]) -> bytes:
        body = {"command": "StartJob", "job_id": "j", "run_id": "r", "trace": trace}
        return msgspec.json.encode(body)

    good = f"00-{'a' * 32}-{'b' * 16}-01"
    decoded = msgspec.json.decode(start({"run": good, "job": good}), type=c.StartJob)
    assert decoded.trace is not None and decoded.trace.job == good
    for bad in ({"run": "x"}, {"run": good, "job": "nope"}, {"run": good, "parent": "zz"}):
        with pytest.raises(msgspec.ValidationError, match=r"\$\.trace\."):
            msgspec.json.decode(start(bad), type=c.StartJob)
