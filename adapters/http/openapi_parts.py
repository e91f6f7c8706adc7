"""What a route's OpenAPI operations are declared with: ``Operation``, ``Answer``, ``Body``.

The route table (``adapters.http.routes``) declares each route's operations with them and
``adapters.http.openapi`` writes them out. A schema is a msgspec Struct (written as a ``$ref``
to its component, so the document cannot drift from what is encoded), a tuple of Structs
(``oneOf`` them), or an inline JSON schema. Beside them: a ``$ref``, the error answers by
status and their words, the parameters and schemas several routes share, and the entry
points' own words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.http import schemas as s
from adapters.http.inbound import InvocationIn

REF = "#/components/schemas/{name}"
ERRORS = {
    "400": "bad input",
    "401": "no bearer token, or one nobody holds (the operator's, or a live run's)",
    "403": (
        "a run token outside its scope: another session's job, stream, task or result, a job"
        " it is no ancestor of (results, job controls), a job control its agent was not"
        " granted (not_granted, naming the grant), or what only the operator may (the whole"
        " log, leases, session controls)"
    ),
    "404": "unknown",
    "409": "invalid transition or conflict",
    "410": "retired by a retention policy: the body says when and why (ADR 0062)",
    "412": "If-Match mismatch: a session's version, or a job's control_revision",
    "413": "too large",
    "415": "not JSON",
    "428": "If-Match with the job's control_revision is required for this control",
    "429": "admission refused",
    "503": "another server holds the workspace, or a storage fault (Retry-After when it passes)",
    "507": "the disk is full: storage_full, nothing recorded (Retry-After: 5)",
}

Schema = type | tuple[type, ...] | dict[str, Any]
"""A Struct (its ``$ref``), Structs to choose from (``oneOf``), or an inline JSON schema."""


@dataclass(frozen=True)
class Answer:
    """One answer of an operation: ``schema`` None is an answer without a body (a 304);
    ``sse`` adds a ``text/event-stream`` of strings beside ``media``; ``headers`` are named
    string headers the answer carries."""

    schema: Schema | None
    description: str = "OK"
    media: str = "application/json"
    sse: bool = False
    headers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Body:
    """A JSON request body: ``required`` False when an empty body means the defaults;
    ``refs`` the Structs an inline ``schema`` refers to (for the document's components)."""

    schema: Schema
    required: bool = True
    refs: tuple[type, ...] = ()


@dataclass(frozen=True)
class Link:
    """An OpenAPI link from an operation's success answer to the operation ``target`` (its
    ``operationId``): what a client (or a stateful fuzzer) may call next with what the answer
    named. ``parameters`` by name are runtime expressions (``$response.body#/jobs/0/job_id``,
    or embedded in text: ``job:{$response.body#/invocation}``) or constants; ``body`` is a
    request body whose string leaves may be expressions."""

    target: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    body: Any = None


@dataclass(frozen=True)
class Operation:
    """One method of a route as ``/openapi.json`` describes it.

    ``answer`` is the success (``status``), ``more`` any other answer in full (a 304, another
    error shape), ``errors`` the statuses that answer ``ErrorOut`` with ``ERRORS``' words.
    A route that needs a token gets the bearer scheme and its 401 and 403 from its access, not
    from here. ``path`` is the documented path when it is not the route's own: a route with a
    path field documents one path per value it takes (``/v1/jobs/{job_id}/result/accept``).
    ``links`` go on the success answer, by name: what may be called next with what it names.
    """

    method: str
    id: str
    summary: str
    answer: Schema | Answer
    errors: tuple[str, ...] = ()
    params: tuple[dict[str, Any], ...] = ()
    body: Body | None = None
    description: str = ""
    status: str = "200"
    more: Mapping[str, Answer] = field(default_factory=dict)
    path: str = ""
    links: Mapping[str, Link] = field(default_factory=dict)


def get(
    id: str,
    summary: str,
    answer: Schema | Answer,
    errors: str = "",
    params: tuple[dict[str, Any], ...] = (),
    description: str = "",
    more: Mapping[str, Answer] | None = None,
    links: Mapping[str, Link] | None = None,
) -> Operation:
    """A GET ``Operation``; ``errors`` its ``ErrorOut`` statuses, apart by spaces."""
    return Operation(
        "get",
        id,
        summary,
        answer,
        tuple(errors.split()),
        params,
        None,
        description,
        "200",
        more or {},
        links=links or {},
    )


def post(
    id: str,
    summary: str,
    answer: Schema | Answer,
    errors: str = "",
    body: Body | None = None,
    params: tuple[dict[str, Any], ...] = (),
    description: str = "",
    status: str = "200",
    more: Mapping[str, Answer] | None = None,
    path: str = "",
    links: Mapping[str, Link] | None = None,
) -> Operation:
    """A POST ``Operation``; ``errors`` its ``ErrorOut`` statuses, apart by spaces."""
    return Operation(
        "post",
        id,
        summary,
        answer,
        tuple(errors.split()),
        params,
        body,
        description,
        status,
        more or {},
        path,
        links or {},
    )


def ref(cls: type) -> dict[str, str]:
    return {"$ref": REF.format(name=cls.__name__)}


def json_body(cls: type, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref(cls)}}}


def error_bodies(*codes: str) -> dict[str, Any]:
    return {code: json_body(s.ErrorOut, ERRORS[code]) for code in codes}


def param(
    name: str, where: str = "query", required: bool = False, schema: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "schema": schema or {"type": "string"}}


def in_path(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """A path field: a required string (``adapters.http.openapi`` adds one for each field of
    a path an operation does not describe)."""
    return param(name, "path", True, schema)


# The parameters and schemas several routes share.
LIMIT = param("limit", schema={"type": "integer", "minimum": 1, "maximum": 500})
AFTER_ID = param("after", schema={"type": "string", "minLength": 1})
IF_MATCH = param("If-Match", "header", schema={"type": "string", "pattern": "^[0-9]+$"})
# A live channel's controls name the job's control revision they were sent against (ADR 0057).
IF_MATCH_REQUIRED = {**IF_MATCH, "required": True}
POSITION = {"type": "integer", "minimum": 0, "maximum": (1 << 63) - 1}
SIZE = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
TEXT = {"type": "string"}
ANY_OBJECT = {"type": "object"}
OBJECTS = {"type": "array", "items": ANY_OBJECT}
CURSOR = param("cursor", schema={"type": "integer", "minimum": 0})
EVENTS_LIMIT = param("limit", schema={"type": "integer", "minimum": 1, "maximum": 10000})
PROOF = Answer({"type": "object", "description": "the JSON `foldline prove` prints"}, "the proof")


def control(kind: str, actions: list[str] | None, row: type) -> Operation:
    """A session or job control; ``actions`` None is taint, a path of its own whose body (a
    reason) is required."""
    action = () if actions is None else (in_path("action", {"type": "string", "enum": actions}),)
    return post(
        f"control_{kind}" if actions else f"taint_{kind}",
        f"Control a {kind}: {', '.join(actions or ['taint'])}",
        row,
        "400 401 403 404 409 412 413 415 429 503",
        params=(*action, IF_MATCH),
        body=Body(s.ControlIn if actions else s.TaintIn, required=actions is None),
    )


def agent_errors(codes: str) -> dict[str, Answer]:
    """AgentCore's error answers (``{"error": text}``) of ``codes``, apart by spaces."""
    return {code: Answer(s.AgentErrorOut, ERRORS.get(code, "error")) for code in codes.split()}


def _given(name: str) -> dict[str, Any]:
    """``name`` is present and not null."""
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


GET = {"required": ["get"]}
# ``POST /invocations``: the Struct, and what it cannot say: a get, a prompt or a promptFile,
# exactly one (a get beside any prompt key is refused; a null prompt key is an absent one).
INVOCATION = {
    "allOf": [
        ref(InvocationIn),
        {
            "oneOf": [
                {
                    "required": ["get"],
                    "not": {"anyOf": [{"required": ["prompt"]}, {"required": ["promptFile"]}]},
                },
                {**_given("prompt"), "not": {"anyOf": [_given("promptFile"), GET]}},
                {**_given("promptFile"), "not": {"anyOf": [_given("prompt"), GET]}},
            ]
        },
    ]
}

# The entry points' own words: their bodies are pass-through JSON or JSON-RPC, which the README
# specifies; only their fixed shapes have schemas.
CARD = (
    "Sent with a weak ETag (sha256 of the card) and Cache-Control: private, max-age=300;"
    " If-None-Match with a current tag answers 304 without a body."
)
INVOKE = (
    "Plain JSON waits at most FOLDLINE_SYNC_WAIT_S (600 s) and may answer a running job; with"
    " Accept: text/event-stream the stream has no cap: accepted, delta per output chunk,"
    " keep-alive comments, and always the final result. deliver (default true) sends the prompt"
    " into the session's running job when its run takes input (every answer then says"
    " delivered: true and its control); otherwise the new job supersedes it and its run gets"
    " the superseded job's prompts first, joined by a blank line (covers; the superseded body's"
    " supersededBy names the new job). deliver: false runs the new prompt alone. A session runs"
    " the agent it was created with: a call naming another gets that agent's answer and a"
    " warning (warnings: session s1 runs agent a; agent b ignored). A run that asks its caller"
    " a question answers sync at once: the job, status running, with waitingForInput: true and"
    " questions (request, question); SSE sends an input_required event and stays open. The next"
    " prompt on that session, whatever deliver says, is the answer to the oldest question"
    " (answered names it)."
)
A2A = (
    "A2A JSON-RPC: SendMessage, SendStreamingMessage, GetTask, CancelTask, ListTasks,"
    " SubscribeToTask, the push config methods, and the 0.3 names (message/send,"
    " message/stream, tasks/get, tasks/cancel, tasks/resubscribe, tasks/pushNotificationConfig/*)"
)
A2A_ERRORS = (
    "Always HTTP 200 with a JSON-RPC result or error (-32001 task not found, -32002 not"
    " cancelable, -32004 unsupported, -32005 content type not supported, -32009 version)."
    " Streams are SSE: the Task, status updates and artifact chunks (append, lastChunk)."
)
