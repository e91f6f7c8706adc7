"""``GET /openapi.json``: OpenAPI 3.1 for ``/v1`` and the AgentCore and A2A entry points,
written out from the route table (``adapters.http.routes``) and the msgspec Structs.

Each path comes from its route's operations, its path parameters from its template's fields,
the bearer scheme and its 401 and 403 from its access, and every body schema from the Structs
the operations name, through
``msgspec.json.schema_components``: the document cannot drift from what is routed, guarded
or encoded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import falcon
import msgspec

from adapters.http import schemas as s
from adapters.http.auth import Access
from adapters.http.openapi_parts import (
    REF,
    Answer,
    Body,
    Link,
    Operation,
    Schema,
    error_bodies,
    in_path,
    ref,
)
from adapters.http.ports import ServerRuntime
from adapters.http.routing import Routes

FIELD = re.compile(r"{(\w+)}")

DESCRIPTION = (
    "Reads and controls over foldline's read models (/v1), the AgentCore runtime"
    " contract (/ping, /invocations) and A2A (JSON-RPC on /, 1.0 and 0.3 method"
    ' names; the agent card). Any other path answers 404 {"error": "not found"}.'
    " Every /v1 call needs a bearer token: the operator's (FOLDLINE_TOKEN, or the"
    " file the server makes beside the log) or a live run's FOLDLINE_RUN_TOKEN,"
    " which reads only its own session."
)


def document(routes: Routes, agents: list[str] | None = None) -> dict[str, Any]:
    """The document of ``routes``; ``agents`` are the names this server knows (default:
    only ``""``)."""
    paths: dict[str, dict[str, Any]] = {}
    structs: dict[type, None] = {s.ErrorOut: None}  # an ordered set
    for route in routes.values():
        for operation in route.operations:
            path = operation.path or route.path
            item = paths.setdefault(path, {})
            item[operation.method] = _operation(operation, path, route.access is not Access.OPEN)
            structs.update(dict.fromkeys(_structs(operation)))
    _, schemas = msgspec.json.schema_components(list(structs), ref_template=REF)
    _agents(schemas, sorted(agents or [""]))
    return {
        "openapi": "3.1.0",
        "info": {"title": "foldline", "version": "0.1.0", "description": DESCRIPTION},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


class OpenApi:
    """The resource: the document of the table it was made with, for this server's agents."""

    def __init__(self, routes: Routes, runtime: ServerRuntime) -> None:
        self.routes = routes
        self.agents = sorted(runtime.config.agents.commands)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = document(self.routes, self.agents)


def _operation(operation: Operation, path: str, secured: bool) -> dict[str, Any]:
    """One operation at ``path``; ``secured``: it needs the bearer token (401) and answers 403
    outside a run token's scope."""
    out: dict[str, Any] = {"operationId": operation.id, "summary": operation.summary}
    if operation.description:
        out["description"] = operation.description
    if parameters := _parameters(operation, path):
        out["parameters"] = parameters
    if operation.body is not None:
        out["requestBody"] = _body(operation.body)
    answer = operation.answer if isinstance(operation.answer, Answer) else Answer(operation.answer)
    success = _answer(answer)
    if operation.links:
        success["links"] = {name: _link(link) for name, link in operation.links.items()}
    responses = {
        operation.status: success,
        **{status: _answer(more) for status, more in operation.more.items()},
        **error_bodies(*operation.errors),
    }
    if secured:
        responses = {**error_bodies("401", "403"), **responses}
    out["responses"] = responses
    if secured:
        out["security"] = [{"bearer": []}]
    return out


def _parameters(operation: Operation, path: str) -> list[dict[str, Any]]:
    """A field of ``path`` for each of its fields (a required string, unless the operation
    describes it), in the path's order, then the operation's other parameters."""
    given = {p["name"]: p for p in operation.params if p["in"] == "path"}
    fields = [given.get(name) or in_path(name) for name in FIELD.findall(path)]
    return [*fields, *(p for p in operation.params if p not in fields)]


def _schema(schema: Schema) -> dict[str, Any]:
    if isinstance(schema, type):
        return ref(schema)
    if isinstance(schema, tuple):
        return {"oneOf": [ref(one) for one in schema]}
    return schema


def _body(body: Body) -> dict[str, Any]:
    return {
        "required": body.required,
        "content": {"application/json": {"schema": _schema(body.schema)}},
    }


def _answer(answer: Answer) -> dict[str, Any]:
    out: dict[str, Any] = {"description": answer.description}
    if answer.headers:
        out["headers"] = {name: {"schema": {"type": "string"}} for name in answer.headers}
    if answer.schema is not None:
        out["content"] = {answer.media: {"schema": _schema(answer.schema)}}
        if answer.sse:
            out["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    return out


def _link(link: Link) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": link.target}
    if link.parameters:
        out["parameters"] = dict(link.parameters)
    if link.body is not None:
        out["requestBody"] = link.body
    return out


def _structs(operation: Operation) -> Iterator[type]:
    """The Structs ``operation`` refers to, for the document's components."""
    answers = [operation.answer, *operation.more.values()]
    schemas = [a.schema if isinstance(a, Answer) else a for a in answers]
    if operation.body is not None:
        schemas.extend((operation.body.schema, *operation.body.refs))
    for schema in schemas:
        if isinstance(schema, type):
            yield schema
        elif isinstance(schema, tuple):
            yield from schema


def _agents(schema: dict[str, Any], agents: list[str]) -> None:
    """The configured agent names are the only ones a spawn accepts: an enum in the document."""
    for name in ("SpawnOneIn", "SpawnItemIn"):
        if name in schema:  # a table without the spawn route has neither
            schema[name]["properties"]["agent"] = {"type": "string", "enum": agents, "default": ""}
