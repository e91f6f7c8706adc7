"""``GET /openapi.json``: OpenAPI 3.1 for ``/v1`` and the AgentCore and A2A entry points,
generated from the msgspec Structs.

Only the paths are listed here; every body schema comes from ``adapters.http.schemas`` through
``msgspec.json.schema_components``, so the document cannot drift from what is encoded.
"""

from __future__ import annotations

from typing import Any

import msgspec

from adapters.http import schemas as s
from adapters.http.inbound import InvocationIn
from adapters.http.v1 import JOB_ACTIONS, SESSION_ACTIONS

REF = "#/components/schemas/{name}"
ERRORS = {
    "400": "bad input",
    "401": "no bearer token, or one nobody holds (the operator's, or a live run's)",
    "403": (
        "a run token outside its scope: another session's job, stream, task or result, or"
        " what only the operator may (the whole log, leases, controls)"
    ),
    "404": "unknown",
    "409": "invalid transition or conflict",
    "412": "If-Match version mismatch",
    "413": "too large",
    "415": "not JSON",
    "429": "admission refused",
    "503": "another server holds the workspace, or a storage fault (Retry-After when it passes)",
    "507": "the disk is full: storage_full, nothing recorded (Retry-After: 5)",
}


def _ref(cls: type) -> dict[str, str]:
    return {"$ref": REF.format(name=cls.__name__)}


def _json(cls: type, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(cls)}}}


def _errors(*codes: str) -> dict[str, Any]:
    return {code: _json(s.ErrorOut, ERRORS[code]) for code in codes}


def _param(
    name: str, where: str = "query", required: bool = False, schema: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "schema": schema or {"type": "string"}}


LIMIT = _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 500})
AFTER_ID = _param("after", schema={"type": "string", "minLength": 1})


def _control(
    kind: str, key: str, actions: list[str] | None, row: type, body: type = s.ControlIn
) -> dict[str, Any]:
    """A control call; ``actions`` None is a path of its own (taint) with a required body."""
    action = (
        []
        if actions is None
        else [_param("action", "path", True, {"type": "string", "enum": actions})]
    )
    return {
        "post": {
            "summary": f"Control a {kind}: {', '.join(actions or ['taint'])}",
            "operationId": f"control_{kind}" if actions else f"taint_{kind}",
            "parameters": [
                _param(key, "path", True),
                *action,
                _param("If-Match", "header", schema={"type": "string", "pattern": "^[0-9]+$"}),
            ],
            "requestBody": {
                "required": actions is None,
                "content": {"application/json": {"schema": _ref(body)}},
            },
            "responses": {
                "200": _json(row),
                **_errors("400", "401", "404", "409", "412", "413", "415", "429", "503"),
            },
        }
    }


def _judge(name: str, body: type, summary: str = "", required: bool = True) -> dict[str, Any]:
    return {
        "post": {
            "operationId": f"result_{name}",
            "summary": summary or f"Record the result as {name}",
            "parameters": [_param("job_id", "path", True)],
            "requestBody": {
                "required": required,
                "content": {"application/json": {"schema": _ref(body)}},
            },
            "responses": {
                "200": _json(s.JobOut),
                **_errors("400", "401", "403", "404", "409", "413", "415", "503"),
            },
        }
    }


def _agents(schema: dict[str, Any], agents: list[str]) -> None:
    """The configured agent names are the only ones a spawn accepts: an enum in the document."""
    for name in ("SpawnOneIn", "SpawnItemIn"):
        schema[name]["properties"]["agent"] = {"type": "string", "enum": agents, "default": ""}


def document(agents: list[str] | None = None) -> dict[str, Any]:
    """The document; ``agents`` are the names this server knows (default: only ``""``)."""
    _, schemas = msgspec.json.schema_components(
        [
            s.ErrorOut,
            s.SessionOut,
            s.SessionPage,
            s.JobOut,
            s.JobPage,
            s.TaskOut,
            s.LeasePage,
            s.EventPage,
            s.ControlIn,
            s.TaintIn,
            s.PingOut,
            s.AgentErrorOut,
            InvocationIn,
            s.SpawnOneIn,
            s.SpawnBatchIn,
            s.JobsOut,
            s.WaitOut,
            s.ResultOut,
            s.DispositionIn,
            s.IntegrateIn,
        ],
        ref_template=REF,
    )
    _agents(schemas, sorted(agents or [""]))
    position = {"type": "integer", "minimum": 0, "maximum": (1 << 63) - 1}
    paths: dict[str, Any] = {
        "/v1/sessions": {
            "get": {
                "operationId": "list_sessions",
                "summary": "Sessions, by id",
                "parameters": [_param("state"), LIMIT, AFTER_ID],
                "responses": {"200": _json(s.SessionPage), **_errors("400")},
            }
        },
        "/v1/sessions/{session_id}": {
            "get": {
                "operationId": "get_session",
                "summary": "One session",
                "parameters": [_param("session_id", "path", True)],
                "responses": {"200": _json(s.SessionOut), **_errors("404")},
            }
        },
        "/v1/sessions/{session_id}/{action}": _control(
            "session", "session_id", sorted(SESSION_ACTIONS), s.SessionOut
        ),
        "/v1/sessions/{session_id}/taint": _control(
            "session", "session_id", None, s.SessionOut, s.TaintIn
        ),
        "/v1/jobs": {
            "get": {
                "operationId": "list_jobs",
                "summary": "Jobs, by id; filter by session and state",
                "parameters": [
                    _param("session"),
                    _param("state"),
                    _param("parent"),
                    LIMIT,
                    AFTER_ID,
                ],
                "responses": {"200": _json(s.JobPage), **_errors("400")},
            },
            "post": {
                "operationId": "spawn_jobs",
                "summary": "Spawn one job or a batch of 1..12 (all-or-nothing)",
                "parameters": [_param("Authorization", "header")],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"oneOf": [_ref(s.SpawnOneIn), _ref(s.SpawnBatchIn)]}
                        }
                    },
                },
                "responses": {
                    "201": _json(s.JobsOut, "Created"),
                    **_errors("400", "401", "403", "404", "409", "413", "415", "429", "503"),
                },
            },
        },
        "/v1/jobs/wait": {
            "get": {
                "operationId": "wait_for_jobs",
                "summary": "Until all are terminal or one changed (bounded)",
                "parameters": [
                    _param("ids", required=True, schema={"type": "string", "minLength": 1}),
                    _param("timeout", schema={"type": "number", "minimum": 0, "maximum": 5}),
                ],
                "responses": {"200": _json(s.WaitOut), **_errors("400", "404")},
            }
        },
        "/v1/jobs/{job_id}/result": {
            "get": {
                "operationId": "read_result",
                "summary": "A page of the result text; the first read is recorded",
                "parameters": [
                    _param("job_id", "path", True),
                    _param("cursor", schema={"type": "integer", "minimum": 0}),
                    _param("Authorization", "header"),
                ],
                "responses": {
                    "200": _json(s.ResultOut),
                    **_errors("400", "401", "403", "404", "409", "503"),
                },
            }
        },
        "/v1/jobs/{job_id}": {
            "get": {
                "operationId": "get_job",
                "summary": "One job",
                "parameters": [_param("job_id", "path", True)],
                "responses": {"200": _json(s.JobOut), **_errors("404")},
            }
        },
        **{
            f"/v1/jobs/{{job_id}}/result/{name}": _judge(name, s.DispositionIn)
            for name in ("accept", "reject")
        },
        **{
            f"/v1/jobs/{{job_id}}/result/{name}": _judge(
                name,
                s.IntegrateIn,
                "Apply the accepted patch to the workspace and record it (409: conflicting paths)",
                required=False,
            )
            for name in ("integrate", "integrated")
        },
        "/v1/jobs/{job_id}/patch": {
            "get": {
                "operationId": "get_patch",
                "summary": "A writer's change as kept: a binary-safe git diff against its base",
                "parameters": [_param("job_id", "path", True)],
                "responses": {
                    "200": {
                        "description": "The patch",
                        "content": {"text/x-diff": {"schema": {"type": "string"}}},
                    },
                    **_errors("404", "409"),
                },
            }
        },
        "/v1/jobs/{job_id}/{action}": _control("job", "job_id", sorted(JOB_ACTIONS), s.JobOut),
        "/v1/tasks/{task_id}": {
            "get": {
                "operationId": "get_task",
                "summary": "One A2A task",
                "parameters": [_param("task_id", "path", True)],
                "responses": {"200": _json(s.TaskOut), **_errors("404")},
            }
        },
        "/v1/leases": {
            "get": {
                "operationId": "list_leases",
                "summary": "Leases",
                "responses": {"200": _json(s.LeasePage)},
            }
        },
        "/v1/streams/{stream_id}/events": {
            "get": {
                "operationId": "stream_events",
                "summary": "One stream's events",
                "parameters": [_param("stream_id", "path", True), _param("after", schema=position)],
                "responses": {"200": _json(s.EventPage), **_errors("400", "404")},
            }
        },
        "/v1/events": {
            "get": {
                "operationId": "events",
                "summary": "The log after a position; SSE with Accept: text/event-stream",
                "parameters": [
                    _param("after", schema=position),
                    _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 10000}),
                ],
                "responses": {"200": _json(s.EventPage), **_errors("400")},
            }
        },
        "/v1/machines": {
            "get": {
                "operationId": "machines",
                "summary": "The machine declarations (JSON)",
                "responses": {
                    "200": {
                        "description": "OK",
                        "content": {
                            "application/json": {
                                "schema": {"type": "array", "items": {"type": "object"}}
                            }
                        },
                    }
                },
            }
        },
    }
    _secure(paths)
    paths.update(_entry_points())
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "foldline",
            "version": "0.1.0",
            "description": (
                "Reads and controls over foldline's read models (/v1), the AgentCore runtime"
                " contract (/ping, /invocations) and A2A (JSON-RPC on /, 1.0 and 0.3 method"
                ' names; the agent card). Any other path answers 404 {"error": "not found"}.'
                " Every /v1 call needs a bearer token: the operator's (FOLDLINE_TOKEN, or the"
                " file the server makes beside the log) or a live run's FOLDLINE_RUN_TOKEN,"
                " which reads only its own session."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _secure(paths: dict[str, Any]) -> None:
    """Every ``/v1`` operation needs the bearer token (401) and answers 403 outside a run
    token's scope; the entry points added after this keep their own contracts."""
    for path, item in paths.items():
        if path.startswith("/v1/"):
            for operation in item.values():
                operation["security"] = [{"bearer": []}]
                operation["responses"] = {**_errors("401", "403"), **operation["responses"]}


def _agent_errors(*codes: str) -> dict[str, Any]:
    return {code: _json(s.AgentErrorOut, ERRORS.get(code, "error")) for code in codes}


def _entry_points() -> dict[str, Any]:
    """The AgentCore and A2A paths. Their bodies are pass-through JSON or JSON-RPC, described
    here and specified in the README; only the fixed shapes have schemas."""
    any_object = {"type": "object"}
    sse = {"text/event-stream": {"schema": {"type": "string"}}}
    return {
        "/ping": {
            "get": {
                "operationId": "ping",
                "summary": "AgentCore health: Healthy, or HealthyBusy while work is in flight",
                "responses": {"200": _json(s.PingOut)},
            }
        },
        "/.well-known/agent-card.json": {
            "get": {
                "operationId": "agent_card",
                "summary": "The A2A agent card (a 1.0 and a 0.3 interface on the same URL)",
                "description": (
                    "Sent with a weak ETag (sha256 of the card) and Cache-Control: private,"
                    " max-age=300; If-None-Match with a current tag answers 304 without a body."
                ),
                "responses": {
                    "200": {
                        "description": "OK",
                        "headers": {
                            "ETag": {"schema": {"type": "string"}},
                            "Cache-Control": {"schema": {"type": "string"}},
                        },
                        "content": {"application/json": {"schema": any_object}},
                    },
                    "304": {"description": "the caller's copy is current"},
                },
            }
        },
        "/invocations": {
            "post": {
                "operationId": "invoke",
                "summary": "AgentCore: a new job (sync, async or SSE), or a get of one",
                "description": (
                    "Plain JSON waits at most FOLDLINE_SYNC_WAIT_S (600 s) and may answer a"
                    " running job; with Accept: text/event-stream the stream has no cap: accepted,"
                    " delta per output chunk, keep-alive comments, and always the final result."
                ),
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref(InvocationIn)}},
                },
                "responses": {
                    "200": {
                        "description": "the job body, a receipt (async) or an SSE stream",
                        "content": {"application/json": {"schema": any_object}, **sse},
                    },
                    **_agent_errors("400", "404", "409", "413", "429", "503", "507"),
                    "500": _json(s.AgentErrorOut, "the run could not be started"),
                },
            }
        },
        "/": {
            "post": {
                "operationId": "a2a",
                "summary": "A2A JSON-RPC: SendMessage, SendStreamingMessage, GetTask, CancelTask,"
                " ListTasks, SubscribeToTask, and the 0.3 names message/send, message/stream,"
                " tasks/get, tasks/cancel, tasks/resubscribe",
                "description": (
                    "Always HTTP 200 with a JSON-RPC result or error (-32001 task not found,"
                    " -32002 not cancelable, -32003 push unsupported, -32004 unsupported,"
                    " -32005 content type not supported, -32009 version). Streams are SSE:"
                    " the Task, status updates and artifact chunks (append, lastChunk)."
                ),
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": any_object}},
                },
                "responses": {
                    "200": {
                        "description": "a JSON-RPC response, or an SSE stream of them",
                        "content": {"application/json": {"schema": any_object}, **sse},
                    }
                },
            }
        },
    }
