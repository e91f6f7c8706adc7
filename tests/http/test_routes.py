"""The route table (``adapters.http.routes``) is the one source of every route: the server and
the read-only console serve exactly its routes, each guarded by its access, answering in its
surface, behind the shared-volume gate as it says, and ``/openapi.json`` lists exactly its
documented ones. A probe table shows that each decision follows the entry, not the path."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import falcon
import falcon.inspect
import falcon.testing
import pytest
import schemathesis

from adapters.http import openapi
from adapters.http import openapi_links as links
from adapters.http.app import create_app
from adapters.http.auth import Access
from adapters.http.errors import AGENTCORE, V1
from adapters.http.openapi_parts import get
from adapters.http.routes import ROUTES, document
from adapters.http.routing import Route, Routes, Unlisted
from adapters.programs.console_server import ReadOnlyConfig, ReadOnlyRuntime, create_readonly_app
from adapters.services.runtime import Runtime
from adapters.settings.config import LEASE_BUSY_TEXT
from adapters.system.leasefile import LeaseRecord
from tests.http.conftest import MakeClient
from tests.support.front import wait_until

NEEDS_OPERATOR = "needs the operator token"
SAID = "run-token"


def _served(app: Any) -> dict[str, set[str]]:
    """Each URI template ``app`` routes, with the methods its resource answers."""
    return {
        route.path: {m.method for m in route.methods if not m.internal}
        for route in falcon.inspect.inspect_app(app).routes
    }


def _concrete(template: str) -> str:
    """A path the template matches: every field ``x``."""
    return "/".join("x" if part.startswith("{") else part for part in template.split("/"))


def test_routes_the_server_serves_exactly_the_table_and_documents_its_listed_routes(
    make_client: MakeClient,
) -> None:
    client, _ = make_client()
    served = _served(client.app)
    assert set(served) == set(ROUTES)
    documented = document()["paths"]
    listed: set[str] = set()
    for path, route in ROUTES.items():
        if isinstance(route.openapi, Unlisted):
            assert route.openapi.reason.strip() and path not in documented, path
        assert route.operations or isinstance(route.openapi, Unlisted), path
        for operation in route.operations:
            where = operation.path or path
            assert operation.method in documented[where], (where, operation.method)
            assert operation.method.upper() in served[path], (path, operation.method)
            listed.add(where)
    assert listed == set(documented)  # nothing documented that no route declares


def test_routes_the_documents_links_chain_what_a_spawn_makes_to_every_job_operation() -> None:
    """Every link names a documented operation and its parameters (schemathesis builds its
    state machine from them, and refuses a link to an unknown one), and a spawn, a job
    listing, an invocation and A2A's answer each lead to what works on what they name."""
    doc = document(["", "other"])
    schemathesis.openapi.from_dict(copy.deepcopy(doc)).as_state_machine()  # refuses bad links
    ids = {op["operationId"]: op for item in doc["paths"].values() for op in item.values()}
    targets = {link.target for link in links.FIRST_JOB.values()}
    on_a_job = {i for i, op in ids.items() if "{job_id}" in _path_of(doc, i)}
    assert on_a_job <= targets
    for path, method, status in (
        ("/v1/jobs", "post", "201"),
        ("/v1/jobs", "get", "200"),
        ("/invocations", "post", "200"),
    ):
        made = doc["paths"][path][method]["responses"][status]["links"]
        assert {link["operationId"] for link in made.values()} >= targets | {"get_session"}
    answered = doc["paths"]["/"]["post"]["responses"]["200"]["links"]
    assert {"get_task", "a2a", "get_session"} <= {v["operationId"] for v in answered.values()}
    methods = {
        s["properties"]["method"]["const"]
        for s in doc["paths"]["/"]["post"]["requestBody"]["content"]["application/json"]["schema"][
            "oneOf"
        ]
    }
    assert {"SendMessage", "GetTask", "CancelTask", "ListTasks", "message/send"} <= methods


def _path_of(doc: dict[str, Any], operation_id: str) -> str:
    return next(
        path
        for path, item in doc["paths"].items()
        for op in item.values()
        if op["operationId"] == operation_id
    )


def test_routes_the_read_only_console_serves_exactly_its_entries_and_only_reads(
    tmp_path: Path,
) -> None:
    runtime = ReadOnlyRuntime(ReadOnlyConfig(tmp_path / "never-opened.db"))
    served = _served(create_readonly_app(runtime))
    assert set(served) == {path for path, route in ROUTES.items() if route.read_only is not None}
    assert {"/v1/jobs", "/console/api/overview", "/v1/machines"} <= set(served)
    assert all(methods == {"GET"} for methods in served.values()), served
    assert not (tmp_path / "never-opened.db").exists()


@pytest.fixture
def run_token(make_client: MakeClient) -> Iterator[tuple[Runtime, str]]:
    """A server runtime with a live run whose ``FOLDLINE_RUN_TOKEN`` the run wrote down (in
    its working directory, the workspace: the run's user may write nowhere else)."""
    client, runtime = make_client(
        f'printf %s "$FOLDLINE_RUN_TOKEN" > {SAID}; cat >/dev/null; sleep 30'
    )
    said = runtime.config.workspace / SAID
    job = client.simulate_post("/invocations", json={"prompt": "x", "async": True}).json

    def is_running() -> bool:
        return client.simulate_get(f"/v1/jobs/{job['invocation']}").json["state"] == "running"

    wait_until(lambda: said.exists() and said.stat().st_size > 0, what="the run's token")
    wait_until(is_running, what="the run to be live")
    yield runtime, said.read_text()


def _ask(client: falcon.testing.TestClient, method: str, path: str, token: str | None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.simulate_request(method, path, headers=headers)


def test_routes_every_route_is_guarded_as_its_entry_says(run_token: tuple[Runtime, str]) -> None:
    """No token: a 401 exactly where the entry is not ``OPEN``. A run's token: refused for
    the operator only where the entry says ``OPERATOR``. The operator's: never refused."""
    runtime, token = run_token
    client = falcon.testing.TestClient(create_app(runtime))
    operator, served = runtime.config.token, _served(client.app)
    for template, route in ROUTES.items():
        path = _concrete(template)
        method = "GET" if "GET" in served[template] else "POST"
        anyone = _ask(client, method, path, None)
        assert (anyone.status_code == 401) == (route.access is not Access.OPEN), template
        if route.access is Access.OPEN:
            continue
        run = _ask(client, method, path, token)
        refused = run.status_code == 403 and NEEDS_OPERATOR in run.text
        assert refused == (route.access is Access.OPERATOR), (template, run.text)
        assert _ask(client, method, path, operator).status_code not in (401, 403), template


class Probe:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"probe": req.path}


def _probes() -> Routes:
    """One entry per decision: access, surface, document, console and lease, none by path."""
    return Routes(
        [
            Route("/v1/probe/open", lambda rt: Probe(), Access.OPEN, V1, Unlisted("a probe")),
            Route(
                "/v1/probe/operator",
                lambda rt: Probe(),
                Access.OPERATOR,
                V1,
                get("probe", "A probe", {"type": "object"}),
                read_only=lambda rt: Probe(),
            ),
            Route("/elsewhere", lambda rt: Probe(), Access.RUN, AGENTCORE, Unlisted("a probe")),
            Route(
                "/v1/probe/free",
                lambda rt: Probe(),
                Access.OPEN,
                V1,
                Unlisted("a probe"),
                holds_lease=False,
            ),
        ]
    )


def test_routes_a_probe_entry_is_served_guarded_and_documented_as_it_says(
    run_token: tuple[Runtime, str], tmp_path: Path
) -> None:
    runtime, token = run_token
    probes = _probes()
    client = falcon.testing.TestClient(create_app(runtime, probes))
    assert set(_served(client.app)) == set(probes)
    assert client.simulate_get("/v1/probe/open").json == {"probe": "/v1/probe/open"}
    closed = client.simulate_get("/v1/probe/operator")  # in its surface's shape: /v1's
    assert closed.status_code == 401 and closed.json["error"]["code"] == "unauthorized"
    outside = client.simulate_get("/elsewhere")  # guarded though outside /v1: AgentCore's
    assert outside.status_code == 401 and isinstance(outside.json["error"], str)
    assert _ask(client, "GET", "/elsewhere", token).status_code == 200
    run = _ask(client, "GET", "/v1/probe/operator", token)
    assert run.status_code == 403 and NEEDS_OPERATOR in run.text
    operator = _ask(client, "GET", "/v1/probe/operator", runtime.config.token)
    assert operator.json == {"probe": "/v1/probe/operator"}
    paths = openapi.document(probes)["paths"]
    assert list(paths) == ["/v1/probe/operator"]
    assert paths["/v1/probe/operator"]["get"]["security"] == [{"bearer": []}]
    console = create_readonly_app(ReadOnlyRuntime(ReadOnlyConfig(tmp_path / "x.db")), probes)
    assert set(_served(console)) == {"/v1/probe/operator"}


def test_routes_the_gate_holds_the_lease_where_the_entry_says(make_client: MakeClient) -> None:
    _, runtime = make_client(shared_volume=True)
    client = falcon.testing.TestClient(create_app(runtime, _probes()))
    runtime.config.db.parent.mkdir(parents=True, exist_ok=True)
    runtime.tenure.file.replace(LeaseRecord("other-server", 1, "h", 1, 0.0))
    busy = client.simulate_get("/v1/probe/open")
    assert busy.status_code == 503 and LEASE_BUSY_TEXT in busy.text
    assert client.simulate_get("/v1/probe/free").json == {"probe": "/v1/probe/free"}
    assert not runtime.is_open  # neither opened the log
