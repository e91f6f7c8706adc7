"""The /v1 API through falcon's test client: every status, the error table, OpenAPI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
from openapi_spec_validator import validate

from adapters.http import errors
from adapters.http.auth import Access
from adapters.http.routes import ROUTES, document
from adapters.programs.console_server import ReadOnlyConfig, ReadOnlyRuntime, create_readonly_app
from engine import errors as engine_errors
from tests.http.conftest import MakeClient

SLEEPY = "cat >/dev/null; sleep 30"
OPEN = frozenset(path for path, route in ROUTES.items() if route.access is Access.OPEN)


def _all_engine_errors() -> list[type]:
    found, frontier = [], [engine_errors.EngineError]
    while frontier:
        cls = frontier.pop()
        found.append(cls)
        frontier += cls.__subclasses__()
    return found


def test_v1_error_table_has_a_row_for_every_engine_error() -> None:
    # Errors that users' own rules define (tests declare some) fall back on their base's row.
    ours = [cls for cls in _all_engine_errors() if cls.__module__.split(".")[0] == "engine"]
    missing = [cls.__name__ for cls in ours if cls not in errors.STATUS]
    assert not missing, f"no HTTP status for {missing}"


def test_v1_openapi_document_is_valid_openapi_3_1(make_client: MakeClient) -> None:
    client, _ = make_client()
    served = client.simulate_get("/openapi.json").json
    assert served == json.loads(json.dumps(document()))
    assert served["openapi"] == "3.1.0"
    validate(served)
    assert "SessionOut" in served["components"]["schemas"]
    entry_points = {"/ping", "/invocations", "/", "/.well-known/agent-card.json"}
    assert entry_points <= set(served["paths"])
    assert "message/send" in served["paths"]["/"]["post"]["summary"]
    for path, item in served["paths"].items():
        for operation in item.values():
            if path.startswith("/v1/") and path not in OPEN:  # closed by default
                assert operation["security"] == [{"bearer": []}], path
                assert {"401", "403"} <= set(operation["responses"]), path
            else:  # the AgentCore and A2A contracts stay open
                assert "security" not in operation, path


def _session(client: Any, runner_session: str = "s1") -> dict[str, Any]:
    answer = client.simulate_post(
        "/invocations", json={"prompt": "x", "session": runner_session, "async": True}
    )
    return answer.json  # type: ignore[no-any-return]


def test_v1_reads_sessions_jobs_tasks_leases_and_events(make_client: MakeClient) -> None:
    client, _ = make_client(SLEEPY)
    receipt = _session(client)
    sessions = client.simulate_get("/v1/sessions").json
    assert [s["session_id"] for s in sessions["sessions"]] == ["s1"] and sessions["next"] is None
    session = client.simulate_get("/v1/sessions/s1").json
    assert session["owes"] == {"kind": "job", "ref": receipt["invocation"]}
    jobs = client.simulate_get("/v1/jobs", params={"session": "s1", "state": "running"}).json
    assert [j["job_id"] for j in jobs["jobs"]] == [receipt["invocation"]]
    assert client.simulate_get(f"/v1/jobs/{receipt['invocation']}").json["state"] == "running"
    leases = client.simulate_get("/v1/leases").json["leases"]
    assert leases[0]["holder"] == "test-holder" and leases[0]["epoch"] == 1
    events = client.simulate_get("/v1/events", params={"after": "1", "limit": "2"}).json
    assert [e["position"] for e in events["events"]] == [2, 3] and events["next"] == 3
    stream = client.simulate_get("/v1/streams/session:s1/events").json
    assert stream["events"][0]["event_type"] == "session.created"
    assert client.simulate_get("/v1/machines").json[0]["kind"] == "lease"
    mermaid = client.simulate_get("/v1/machines", params={"format": "mermaid"})
    assert "stateDiagram-v2" in mermaid.text


def test_v1_reads_one_machine_by_kind_here_and_on_the_read_only_console(
    make_client: MakeClient, tmp_path: Path
) -> None:
    client, _ = make_client()
    listed = {machine["kind"]: machine for machine in client.simulate_get("/v1/machines").json}
    assert client.simulate_get("/v1/machines/job").json == listed["job"]
    mermaid = client.simulate_get("/v1/machines/job", params={"format": "mermaid"}).text
    assert mermaid.startswith("%% job\n") and "stateDiagram-v2" in mermaid
    missing = client.simulate_get("/v1/machines/nope")
    assert missing.status_code == 404 and missing.json["error"]["code"] == "not_found"
    console = create_readonly_app(ReadOnlyRuntime(ReadOnlyConfig(tmp_path / "never-opened.db")))
    read_only = falcon.testing.TestClient(console).simulate_get("/v1/machines/job")
    assert read_only.json == listed["job"]


def test_v1_lists_page_with_a_cursor(make_client: MakeClient) -> None:
    client, _ = make_client()
    for name in ("a", "b", "c"):
        client.simulate_post("/invocations", json={"prompt": "x", "session": name})
    first = client.simulate_get("/v1/sessions", params={"limit": "2"}).json
    assert [s["session_id"] for s in first["sessions"]] == ["a", "b"] and first["next"] == "b"
    rest = client.simulate_get("/v1/sessions", params={"limit": "2", "after": "b"}).json
    assert [s["session_id"] for s in rest["sessions"]] == ["c"] and rest["next"] is None


@pytest.mark.parametrize(
    "path", ["/v1/sessions", "/v1/jobs", "/v1/events", "/v1/streams/session:a/events"]
)
def test_v1_an_empty_after_is_refused_as_an_empty_limit_is(
    make_client: MakeClient, path: str
) -> None:
    """The fuzzer's case (tests/http/test_fuzz_server.py): ``after=`` was read as the first
    page (or position 0) though the document says a cursor is never empty."""
    client, _ = make_client()
    client.simulate_post("/invocations", json={"prompt": "x", "session": "a"})
    answer = client.simulate_get(path, query_string="after=")
    assert answer.status_code == 400, answer.text
    assert answer.json["error"]["code"] == "invalid_argument"
    assert client.simulate_get(path).status_code == 200


def test_v1_the_wait_documents_the_timeout_it_takes(make_client: MakeClient) -> None:
    """The fuzzer's case (tests/http/test_fuzz_server.py): the document said a wait's
    ``timeout`` was at most 5 s, while the server took 0..300 and waited 60 s for none; a
    chained wait on a paused job outlasted its client. The document now says what it takes."""
    client, _ = make_client(SLEEPY)
    wait = client.simulate_get("/openapi.json").json["paths"]["/v1/jobs/wait"]["get"]
    (timeout,) = (p["schema"] for p in wait["parameters"] if p["name"] == "timeout")
    assert (timeout["minimum"], timeout["maximum"], timeout["default"]) == (0, 300, 60)
    job = _session(client)["invocation"]
    over = client.simulate_get("/v1/jobs/wait", query_string=f"ids={job}&timeout=300.5")
    assert over.status_code == 400 and over.json["error"]["code"] == "invalid_argument"
    now = client.simulate_get("/v1/jobs/wait", query_string=f"ids={job}&timeout=0")
    assert now.status_code == 200 and now.json["timed_out"], now.text


def test_v1_controls_answer_the_new_row(make_client: MakeClient) -> None:
    client, _ = make_client(SLEEPY)
    receipt = _session(client)
    job = receipt["invocation"]
    paused = client.simulate_post(f"/v1/jobs/{job}/pause").json
    assert paused["state"] == "paused"
    assert client.simulate_post(f"/v1/jobs/{job}/continue").json["state"] == "running"
    version = client.simulate_get("/v1/sessions/s1").json["version"]
    detached = client.simulate_post("/v1/sessions/s1/detach", headers={"If-Match": str(version)})
    assert detached.status_code == 200 and detached.json["detached_by"] == "operator"
    tainted = client.simulate_post("/v1/sessions/s1/taint", json={"reason": "suspicious"}).json
    assert tainted["tainted"] and tainted["taint_reasons"] == ["suspicious"]
    cancelled = client.simulate_post("/v1/sessions/s1/cancel", json={"reason": "enough"}).json
    assert cancelled["state"] == "cancelled"
    assert client.simulate_get(f"/v1/jobs/{job}").json["state"] == "cancelled"


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        ("get", "/v1/sessions/nope", {}, 404, "not_found"),
        ("get", "/v1/jobs/nope", {}, 404, "not_found"),
        ("get", "/v1/tasks/nope", {}, 404, "not_found"),
        ("get", "/v1/streams/session:nope/events", {}, 404, "not_found"),
        ("get", "/v1/streams/bogus/events", {}, 404, "unknown_stream_kind"),
        ("get", "/v1/sessions", {"params": {"limit": "0"}}, 400, "invalid_argument"),
        ("get", "/v1/events", {"params": {"after": "x"}}, 400, "invalid_argument"),
        ("post", "/v1/sessions/s1/explode", {}, 404, "not_found"),
        ("post", "/v1/sessions/s1/pause", {"headers": {"If-Match": "99"}}, 412, "version_conflict"),
        ("post", "/v1/sessions/s1/pause", {"headers": {"If-Match": "x"}}, 400, "invalid_argument"),
        ("post", "/v1/sessions/s1/taint", {}, 400, "invalid_argument"),
        ("post", "/v1/sessions/s1/stop", {"json": {"reason": 5}}, 400, "invalid_argument"),
        ("post", "/v1/sessions/s1/stop", {"json": {"why": "x"}}, 400, "invalid_argument"),
        (
            "post",
            "/v1/sessions/s1/stop",
            {"body": "reason", "headers": {"Content-Type": "text/plain"}},
            415,
            "unsupported_media_type",
        ),
        (
            "post",
            "/v1/sessions/s1/stop",
            {"body": "x" * 70000, "headers": {"Content-Type": "application/json"}},
            413,
            "payload_too_large",
        ),
        ("post", "/v1/sessions/nope/pause", {}, 404, "not_found"),
        ("post", "/v1/sessions/s1/continue", {}, 409, "invalid_transition"),
    ],
)
def test_v1_errors_have_the_mapped_status_and_a_stable_code(
    make_client: MakeClient,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
    code: str,
) -> None:
    client, runtime = make_client()
    client.simulate_post("/invocations", json={"prompt": "x", "session": "s1"})
    head = runtime.engine.log.head()
    answer = getattr(client, f"simulate_{method}")(path, **kwargs)
    assert answer.status_code == status, answer.text
    assert answer.json["error"]["code"] == code and answer.json["error"]["message"]
    # A refused call appends nothing but its record in the session's audit stream (ADR 0065).
    after = runtime.engine.log.read_all(head)
    assert {e.stream_id for e in after} <= {"audit:s1"}, after
    assert len(after) == (1 if status in (403, 409, 412, 428, 429) else 0), after
    assert "Traceback" not in answer.text


def test_v1_reads_and_writes_need_the_operator_token(make_client: MakeClient) -> None:
    client, runtime = make_client(token="s3cret")
    client.simulate_post("/invocations", json={"prompt": "x", "session": "s1"})
    bare = falcon.testing.TestClient(client.app)  # no default Authorization header
    head = runtime.engine.log.head()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
        for method, path in (("POST", "/v1/sessions/s1/pause"), ("GET", "/v1/sessions/s1")):
            answer = bare.simulate_request(method, path, headers=headers)
            assert answer.status_code == 401 and answer.json["error"]["code"] == "unauthorized"
            assert answer.headers["www-authenticate"] == "Bearer"
    assert runtime.engine.log.head() == head  # nothing refused was recorded
    assert bare.simulate_get("/console/api/overview").status_code == 401
    assert bare.simulate_get("/console/").status_code == 200  # the page itself is open
    assert bare.simulate_get("/ping").status_code == 200
    assert client.simulate_get("/v1/sessions/s1").status_code == 200
    assert client.simulate_post("/v1/sessions/s1/pause").status_code == 200


def test_v1_control_when_another_server_holds_the_lease_is_503(make_client: MakeClient) -> None:
    first, _ = make_client(holder="one")
    first.simulate_post("/invocations", json={"prompt": "x", "session": "s1"})
    second, _ = make_client(holder="two")
    answer = second.simulate_post("/v1/sessions/s1/pause")
    assert answer.status_code == 503 and answer.json["error"]["code"] == "lease_busy"


def test_metrics_are_prometheus_text(make_client: MakeClient) -> None:
    client, _ = make_client()
    client.simulate_post("/invocations", json={"prompt": "x"})
    text = client.simulate_get("/metrics").text
    assert 'foldline_entities{kind="job",state="ok"} 1' in text
    assert "foldline_commits_total" in text and "foldline_lease_epoch 1" in text
    assert "foldline_group_commit_batch_size_bucket" in text
    for line in text.splitlines():
        assert line.startswith("#") or len(line.rsplit(" ", 1)) == 2
