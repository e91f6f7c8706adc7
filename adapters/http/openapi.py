"""``GET /openapi.json``: OpenAPI 3.1 for ``/v1`` and the AgentCore and A2A entry points,
generated from the msgspec Structs.

Only the paths are listed here; every body schema comes from ``adapters.http.schemas`` through
``msgspec.json.schema_components``, so the document cannot drift from what is encoded.
"""

from __future__ import annotations

from typing import Any

import msgspec

from adapters.http import openapi_parts
from adapters.http import schemas as s
from adapters.http.channel import BODIES as CHANNEL
from adapters.http.inbound import InvocationIn
from adapters.http.openapi_parts import ERRORS, REF, error_bodies, json_body, param, ref
from adapters.http.v1 import JOB_ACTIONS, SESSION_ACTIONS

LIMIT = param("limit", schema={"type": "integer", "minimum": 1, "maximum": 500})
AFTER_ID = param("after", schema={"type": "string", "minLength": 1})


def _control(
    kind: str, key: str, actions: list[str] | None, row: type, body: type = s.ControlIn
) -> dict[str, Any]:
    """A control call; ``actions`` None is a path of its own (taint) with a required body."""
    action = (
        []
        if actions is None
        else [param("action", "path", True, {"type": "string", "enum": actions})]
    )
    return {
        "post": {
            "summary": f"Control a {kind}: {', '.join(actions or ['taint'])}",
            "operationId": f"control_{kind}" if actions else f"taint_{kind}",
            "parameters": [
                param(key, "path", True),
                *action,
                param("If-Match", "header", schema={"type": "string", "pattern": "^[0-9]+$"}),
            ],
            "requestBody": {
                "required": actions is None,
                "content": {"application/json": {"schema": ref(body)}},
            },
            "responses": {
                "200": json_body(row),
                **error_bodies("400", "401", "404", "409", "412", "413", "415", "429", "503"),
            },
        }
    }


def _judge(name: str, body: type, summary: str = "", required: bool = True) -> dict[str, Any]:
    return {
        "post": {
            "operationId": f"result_{name}",
            "summary": summary or f"Record the result as {name}",
            "parameters": [param("job_id", "path", True)],
            "requestBody": {
                "required": required,
                "content": {"application/json": {"schema": ref(body)}},
            },
            "responses": {
                "200": json_body(s.JobOut),
                **error_bodies("400", "401", "403", "404", "409", "413", "415", "503"),
            },
        }
    }


CHANNEL_SUMMARIES = {
    "steer": "Steer the run's active turn (turn must be the job's turn, else 409 stale_turn)",
    "interrupt": "Stop the run's active turn (turn must be the job's turn)",
    "finalize": "Ask the run to finish now from what it has (text optional)",
    "respond": "Answer the run's pending request (a JSON object, at most 64 KiB as JSON)",
    "effort": "Set the run's reasoning effort",
}


def _channel() -> dict[str, Any]:
    """A run's live channel (``adapters.http.channel``): a control is recorded (202), then
    delivered into the run; 409 ``no_channel``, ``stale_turn`` or ``unknown_request``."""
    if_match = param("If-Match", "header", schema={"type": "string", "pattern": "^[0-9]+$"})
    paths: dict[str, Any] = {
        f"/v1/jobs/{{job_id}}/{action}": {
            "post": {
                "operationId": f"{action}_job",
                "summary": CHANNEL_SUMMARIES[action],
                "parameters": [param("job_id", "path", True), if_match],
                "requestBody": {
                    "required": action != "finalize",
                    "content": {"application/json": {"schema": ref(body)}},
                },
                "responses": {
                    "202": json_body(s.ControlSentOut, "Accepted: the control is recorded"),
                    **error_bodies("400", "404", "409", "412", "413", "415", "503"),
                },
            }
        }
        for action, body in CHANNEL.items()
    }
    paths["/v1/jobs/{job_id}/controls"] = {
        "get": {
            "operationId": "job_controls",
            "summary": "A job's latest controls (newest first) and its runs' questions",
            "parameters": [param("job_id", "path", True)],
            "responses": {"200": json_body(s.ChannelOut), **error_bodies("404")},
        }
    }
    return paths


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
            *CHANNEL.values(),
            s.ControlSentOut,
            s.ChannelOut,
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
                "parameters": [param("state"), LIMIT, AFTER_ID],
                "responses": {"200": json_body(s.SessionPage), **error_bodies("400")},
            }
        },
        "/v1/sessions/{session_id}": {
            "get": {
                "operationId": "get_session",
                "summary": "One session",
                "parameters": [param("session_id", "path", True)],
                "responses": {"200": json_body(s.SessionOut), **error_bodies("404")},
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
                    param("session"),
                    param("state"),
                    param("parent"),
                    LIMIT,
                    AFTER_ID,
                ],
                "responses": {"200": json_body(s.JobPage), **error_bodies("400")},
            },
            "post": {
                "operationId": "spawn_jobs",
                "summary": "Spawn one job or a batch of 1..12 (all-or-nothing)",
                "parameters": [param("Authorization", "header")],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"oneOf": [ref(s.SpawnOneIn), ref(s.SpawnBatchIn)]}
                        }
                    },
                },
                "responses": {
                    "201": json_body(s.JobsOut, "Created"),
                    **error_bodies("400", "401", "403", "404", "409", "413", "415", "429", "503"),
                },
            },
        },
        "/v1/jobs/wait": {
            "get": {
                "operationId": "wait_for_jobs",
                "summary": "Until all are terminal or one changed (bounded)",
                "parameters": [
                    param("ids", required=True, schema={"type": "string", "minLength": 1}),
                    param("timeout", schema={"type": "number", "minimum": 0, "maximum": 5}),
                ],
                "responses": {"200": json_body(s.WaitOut), **error_bodies("400", "404")},
            }
        },
        "/v1/jobs/{job_id}/result": {
            "get": {
                "operationId": "read_result",
                "summary": "A page of the result text; the first read is recorded",
                "parameters": [
                    param("job_id", "path", True),
                    param("cursor", schema={"type": "integer", "minimum": 0}),
                    param("Authorization", "header"),
                ],
                "responses": {
                    "200": json_body(s.ResultOut),
                    **error_bodies("400", "401", "403", "404", "409", "503"),
                },
            }
        },
        "/v1/jobs/{job_id}": {
            "get": {
                "operationId": "get_job",
                "summary": "One job",
                "parameters": [param("job_id", "path", True)],
                "responses": {"200": json_body(s.JobOut), **error_bodies("404")},
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
                "parameters": [param("job_id", "path", True)],
                "responses": {
                    "200": {
                        "description": "The patch",
                        "content": {"text/x-diff": {"schema": {"type": "string"}}},
                    },
                    **error_bodies("404", "409"),
                },
            }
        },
        **_channel(),
        "/v1/jobs/{job_id}/{action}": _control("job", "job_id", sorted(JOB_ACTIONS), s.JobOut),
        "/v1/tasks/{task_id}": {
            "get": {
                "operationId": "get_task",
                "summary": "One A2A task",
                "parameters": [param("task_id", "path", True)],
                "responses": {"200": json_body(s.TaskOut), **error_bodies("404")},
            }
        },
        "/v1/leases": {
            "get": {
                "operationId": "list_leases",
                "summary": "Leases",
                "responses": {"200": json_body(s.LeasePage)},
            }
        },
        "/v1/streams/{stream_id}/events": {
            "get": {
                "operationId": "stream_events",
                "summary": "One stream's events",
                "parameters": [param("stream_id", "path", True), param("after", schema=position)],
                "responses": {"200": json_body(s.EventPage), **error_bodies("400", "404")},
            }
        },
        "/v1/events": {
            "get": {
                "operationId": "events",
                "summary": "The log after a position; SSE with Accept: text/event-stream",
                "parameters": [
                    param("after", schema=position),
                    param("limit", schema={"type": "integer", "minimum": 1, "maximum": 10000}),
                ],
                "responses": {"200": json_body(s.EventPage), **error_bodies("400")},
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
    paths.update(openapi_parts.proof_paths())  # open: no bearer
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
                operation["responses"] = {**error_bodies("401", "403"), **operation["responses"]}


def _agent_errors(*codes: str) -> dict[str, Any]:
    return {code: json_body(s.AgentErrorOut, ERRORS.get(code, "error")) for code in codes}


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
                "responses": {"200": json_body(s.PingOut)},
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
                    " deliver: true sends the prompt into the session's running job when its run"
                    " takes input (every answer then says delivered: true and its control)."
                ),
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": ref(InvocationIn)}},
                },
                "responses": {
                    "200": {
                        "description": "the job body, a receipt (async) or an SSE stream",
                        "content": {"application/json": {"schema": any_object}, **sse},
                    },
                    **_agent_errors("400", "404", "409", "413", "429", "503", "507"),
                    "500": json_body(s.AgentErrorOut, "the run could not be started"),
                },
            }
        },
        "/": {
            "post": {
                "operationId": "a2a",
                "summary": "A2A JSON-RPC: SendMessage, SendStreamingMessage, GetTask, CancelTask,"
                " ListTasks, SubscribeToTask, the push config methods, and the 0.3 names"
                " (message/send, message/stream, tasks/get, tasks/cancel, tasks/resubscribe,"
                " tasks/pushNotificationConfig/*)",
                "description": (
                    "Always HTTP 200 with a JSON-RPC result or error (-32001 task not found,"
                    " -32002 not cancelable, -32004 unsupported,"
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
