"""Each route's errors come from its resource's surface (``adapters.http.errors``), never from
a look at the path; the /v1 bodies are their rows' wire part."""

from __future__ import annotations

import msgspec

from adapters.http import errors, schemas
from adapters.http.routes import ROUTES, document
from engine.domain.rows import JobRow, LeaseRow, SessionRow, TaskRow
from tests.http.conftest import MakeClient


def _surface(client: object, path: str) -> errors.Surface:
    app = client.app  # type: ignore[attr-defined]
    *_, template = app._router.find(path)
    return ROUTES[template].errors


def test_every_route_names_the_surface_of_its_family(make_client: MakeClient) -> None:
    client, _ = make_client()
    paths = [p for p in document()["paths"] if p.startswith("/v1/")]
    assert paths
    for path in paths:
        concrete = path.replace("{", "").replace("}", "")
        assert _surface(client, concrete) is errors.V1, path
    assert _surface(client, "/invocations") is errors.INVOCATIONS
    assert _surface(client, "/ping") is errors.AGENTCORE
    assert _surface(client, "/console/api/overview") is errors.CONSOLE


def test_a_refusal_and_an_engine_error_take_their_routes_shape(make_client: MakeClient) -> None:
    client, _ = make_client()
    on_v1 = client.simulate_get("/v1/jobs/nobody")
    assert on_v1.status_code == 404 and on_v1.json["error"]["code"] == "not_found"
    on_invocations = client.simulate_post("/invocations", body=b"[]")
    assert on_invocations.status_code == 400 and isinstance(on_invocations.json["error"], str)


def test_the_v1_bodies_are_the_rows_wire_part() -> None:
    for row, body in (
        (SessionRow, schemas.SessionOut),
        (JobRow, schemas.JobOut),
        (TaskRow, schemas.TaskOut),
        (LeaseRow, schemas.LeaseOut),
    ):
        names = [f.name for f in msgspec.structs.fields(row)]
        wire = list(body.__struct_fields__)
        assert names[: len(wire)] == wire, body.__name__
