"""The route table: every route of the server, once (``adapters.http.routing.Route``).

An entry is a URI template, the resource the server makes for it, its ``Access``, the surface
that writes its errors, its OpenAPI operations (or why it has none), the read-only console's
resource if ``foldline console DB`` serves it, and whether the shared-volume gate lets it
answer without the lease. The server, the read-only console, the authentication, the gate and
``/openapi.json`` are all built from ``ROUTES``: a new route is a new entry (and its resource).
The order is the document's; falcon tries literal segments before fields whatever the order.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from adapters.http import (
    agentcore,
    channel,
    console,
    coordination,
    metrics,
    openapi,
    openapi_jsonrpc,
    proofs,
    v1,
)
from adapters.http import openapi_links as links
from adapters.http import openapi_parts as doc
from adapters.http import schemas as s
from adapters.http.a2a import card, jsonrpc, result_files
from adapters.http.auth import Access
from adapters.http.errors import AGENTCORE, CONSOLE, INVOCATIONS, JSON_RPC, V1
from adapters.http.inbound import InvocationIn
from adapters.http.openapi_parts import Answer, Body, Operation, get, param, post
from adapters.http.ports import ServerRuntime
from adapters.http.routing import Route, Routes, Unlisted

OPEN, RUN, OPERATOR = Access.OPEN, Access.RUN, Access.OPERATOR

INTEGRATE = "Apply the accepted patch to the workspace and record it (409: conflicting paths)"


def _judge(name: str, body: type, summary: str = "", required: bool = True) -> Operation:
    return post(
        f"result_{name}",
        summary or f"Record the result as {name}",
        s.JobOut,
        "400 401 403 404 409 413 415 503",
        body=Body(body, required),
        path=f"/v1/jobs/{{job_id}}/result/{name}",
    )


def _document(runtime: ServerRuntime) -> openapi.OpenApi:
    """``/openapi.json``'s resource: the document of this very table."""
    return openapi.OpenApi(ROUTES, runtime)


def document(agents: list[str] | None = None) -> dict[str, Any]:
    """``/openapi.json`` of this table (``agents``: the names a spawn accepts)."""
    return openapi.document(ROUTES, agents)


ROUTES = Routes(
    [
        Route(
            "/v1/sessions",
            v1.SessionsCollection,
            RUN,
            V1,
            get(
                "list_sessions",
                "Sessions, by id",
                s.SessionPage,
                "400",
                params=(param("state"), doc.LIMIT, doc.AFTER_ID),
                links=links.to_session("$response.body#/sessions/0/session_id"),
            ),
            read_only=v1.SessionsCollection,
        ),
        Route(
            "/v1/sessions/{session_id}",
            v1.SessionItem,
            RUN,
            V1,
            get("get_session", "One session", s.SessionOut, "404"),
            read_only=v1.SessionItem,
        ),
        Route(
            "/v1/sessions/{session_id}/{action}",
            v1.SessionControl,
            OPERATOR,
            V1,
            doc.control("session", sorted(v1.SESSION_ACTIONS), s.SessionOut),
        ),
        Route(
            "/v1/sessions/{session_id}/taint",
            v1.SessionTaint,
            OPERATOR,
            V1,
            doc.control("session", None, s.SessionOut),
        ),
        Route(
            "/v1/jobs",
            coordination.Jobs,
            RUN,
            V1,
            (
                get(
                    "list_jobs",
                    "Jobs, by id; filter by session and state",
                    s.JobPage,
                    "400",
                    params=(
                        param("session"),
                        param("state"),
                        param("parent"),
                        doc.LIMIT,
                        doc.AFTER_ID,
                    ),
                    links=links.FIRST_JOB,
                ),
                post(
                    "spawn_jobs",
                    "Spawn one job or a batch of 1..12 (all-or-nothing)",
                    Answer(s.JobsOut, "Created"),
                    "400 401 403 404 409 413 415 429 503",
                    status="201",
                    params=(param("Authorization", "header"),),
                    body=Body((s.SpawnOneIn, s.SpawnBatchIn)),
                    links=links.FIRST_JOB,
                ),
            ),
            read_only=v1.JobsCollection,  # lists; the console spawns nothing
        ),
        Route(
            "/v1/jobs/wait",
            coordination.Waiting,
            RUN,
            V1,
            get(
                "wait_for_jobs",
                "Until all are terminal or one changed (bounded)",
                s.WaitOut,
                "400 404",
                params=(
                    param("ids", required=True, schema={"type": "string", "minLength": 1}),
                    param("timeout", schema=coordination.TIMEOUT),
                ),
            ),
        ),
        Route(
            "/v1/jobs/{job_id}/result",
            coordination.Result,
            RUN,
            V1,
            get(
                "read_result",
                "A page of the result text (the first read is recorded), or partial: output so far",
                s.ResultOut,
                "400 401 403 404 409 503",
                params=(doc.CURSOR, param("Authorization", "header")),
            ),
        ),
        Route(
            "/v1/jobs/{job_id}",
            v1.JobItem,
            RUN,
            V1,
            get("get_job", "One job", s.JobOut, "404 410"),
            read_only=v1.JobItem,
        ),
        Route(
            "/v1/jobs/{job_id}/result/{disposition}",
            coordination.Disposition,
            RUN,
            V1,
            (
                _judge("accept", s.DispositionIn),
                _judge("reject", s.DispositionIn),
                _judge("integrate", s.IntegrateIn, INTEGRATE, required=False),
                _judge("integrated", s.IntegrateIn, INTEGRATE, required=False),
            ),
        ),
        Route(
            "/v1/jobs/{job_id}/patch",
            coordination.Patch,
            RUN,
            V1,
            get(
                "get_patch",
                "A writer's change as kept: a binary-safe git diff against its base",
                Answer(doc.TEXT, "The patch", "text/x-diff"),
                "404 409",
            ),
        ),
        *(
            Route(
                f"/v1/jobs/{{job_id}}/{action}",
                partial(channel.ControlAction, action=action),
                RUN,  # the operator or an ancestor's live run: the rules check which
                V1,
                post(
                    f"{action}_job",
                    channel.SUMMARIES[action],
                    Answer(s.ControlSentOut, "Accepted: the control is recorded"),
                    "400 403 404 409 412 413 415 428 503",
                    status="202",
                    params=(doc.IF_MATCH_REQUIRED,),
                    body=Body(body, required=action != "finalize"),
                ),
            )
            for action, body in channel.BODIES.items()
        ),
        Route(
            "/v1/jobs/{job_id}/controls",
            channel.Controls,
            RUN,
            V1,
            get(
                "job_controls",
                "A job's latest controls (newest first) and its runs' questions",
                s.ChannelOut,
                "404",
            ),
            read_only=channel.Controls,
        ),
        Route(
            "/v1/jobs/{job_id}/{action}",
            coordination.JobControls,
            RUN,  # the operator or an ancestor's live run granted the action (ADR 0057)
            V1,
            doc.control("job", sorted(v1.JOB_ACTIONS), s.JobOut),
        ),
        Route(
            "/v1/tasks/{task_id}",
            v1.TaskItem,
            RUN,
            V1,
            get("get_task", "One A2A task", s.TaskOut, "404"),
            read_only=v1.TaskItem,
        ),
        Route(
            "/v1/leases",
            v1.Leases,
            OPERATOR,
            V1,
            get("list_leases", "Leases", s.LeasePage),
            read_only=v1.Leases,
        ),
        Route(
            "/v1/streams/{stream_id}/events",
            v1.StreamEvents,
            RUN,
            V1,
            get(
                "stream_events",
                "One stream's events",
                s.EventPage,
                "400 404",
                params=(param("after", schema=doc.POSITION),),
            ),
            read_only=v1.StreamEvents,
        ),
        Route(
            "/v1/events",
            v1.Events,
            OPERATOR,
            V1,
            get(
                "events",
                "The log after a position; SSE with Accept: text/event-stream",
                s.EventPage,
                "400",
                params=(param("after", schema=doc.POSITION), doc.EVENTS_LIMIT),
            ),
            read_only=v1.Events,
        ),
        Route(
            "/v1/machines",
            lambda runtime: v1.MachinesResource(),
            RUN,
            V1,
            get("machines", "The machine declarations (JSON)", doc.OBJECTS),
            read_only=lambda runtime: v1.MachinesResource(),
        ),
        Route(
            "/v1/machines/{kind}",
            lambda runtime: v1.MachineResource(),
            RUN,
            V1,
            get("machine", "One machine's declaration (JSON)", doc.ANY_OBJECT, "404"),
            read_only=lambda runtime: v1.MachineResource(),
        ),
        # Public by design (ADR 0040): a signed note, and proofs that hold only hashes and sizes.
        Route(
            "/v1/checkpoint",
            proofs.Checkpoint,
            OPEN,
            V1,
            get(
                "checkpoint",
                "The latest signed checkpoint (a C2SP signed note); open",
                Answer(doc.TEXT, "the signed note", "text/plain"),
                "404",
            ),
        ),
        Route(
            "/v1/proofs/inclusion",
            proofs.InclusionProof,
            OPEN,
            V1,
            get(
                "inclusion_proof",
                "The event at position is in the tree of size; open",
                doc.PROOF,
                "400 404",
                params=(
                    param("position", required=True, schema=doc.SIZE),
                    param("size", schema=doc.SIZE),
                ),
            ),
        ),
        Route(
            "/v1/proofs/consistency",
            proofs.ConsistencyProof,
            OPEN,
            V1,
            get(
                "consistency_proof",
                "The tree of new extends the tree of old; open",
                doc.PROOF,
                "400 404",
                params=(
                    param("old", required=True, schema=doc.SIZE),
                    param("new", schema=doc.SIZE),
                ),
            ),
        ),
        # The AgentCore and A2A contracts: open, their platform authenticates callers.
        Route(
            "/ping",
            agentcore.Ping,
            OPEN,
            AGENTCORE,
            get(
                "ping",
                "AgentCore health: Healthy, or HealthyBusy while work is in flight",
                s.PingOut,
            ),
            holds_lease=False,
        ),
        Route(
            "/.well-known/agent-card.json",
            card.AgentCard,
            OPEN,
            AGENTCORE,
            get(
                "agent_card",
                "The A2A agent card (a 1.0 and a 0.3 interface on the same URL)",
                Answer(doc.ANY_OBJECT, headers=("ETag", "Cache-Control")),
                description=doc.CARD,
                more={"304": Answer(None, "the caller's copy is current")},
            ),
            holds_lease=False,
        ),
        Route(
            "/invocations",
            agentcore.Invocations,
            OPEN,
            INVOCATIONS,
            post(
                "invoke",
                "AgentCore: a new job (sync, async or SSE), or a get of one",
                Answer(
                    (s.InvocationOut, s.InvocationReceiptOut),
                    "the job body, a receipt (async) or an SSE stream",
                    sse=True,
                ),
                body=Body(doc.INVOCATION, refs=(InvocationIn,)),
                description=doc.INVOKE,
                links=links.to_job("$response.body#/invocation", "$response.body#/session"),
                more={
                    **doc.agent_errors("400 404 409 413 429 503 507"),
                    "500": Answer(s.AgentErrorOut, "the run could not be started"),
                },
            ),
        ),
        Route(
            "/",
            jsonrpc.JsonRpc,
            OPEN,
            JSON_RPC,
            post(
                "a2a",
                doc.A2A,
                Answer(openapi_jsonrpc.RESPONSE, "a JSON-RPC answer, or an SSE stream", sse=True),
                body=Body(openapi_jsonrpc.REQUEST, refs=openapi_jsonrpc.STRUCTS),
                description=doc.A2A_ERRORS,
                links=links.to_task(
                    "$response.body#/result/task/id", "$response.body#/result/task/contextId"
                ),
            ),
        ),
        Route(
            "/a2a/tasks/{task_id}/files/{n}",
            result_files.TaskFile,
            OPEN,  # as A2A is: its platform authenticates callers (a2a.md)
            V1,
            Unlisted("a URL an A2A answer hands out for one result file, not an API to call"),
        ),
        Route("/openapi.json", _document, OPEN, AGENTCORE, Unlisted("the document itself")),
        Route("/metrics", metrics.Metrics, OPEN, AGENTCORE, Unlisted("Prometheus text")),
        # The console: its pages are open, their JSON is the operator's (the whole log).
        *(
            Route(
                path,
                make,
                OPEN,
                CONSOLE,
                Unlisted("the console's page files, for a browser"),
                read_only=make,
            )
            for path, make in (
                ("/console", lambda runtime: console.ToSlash()),
                ("/console/", lambda runtime: console.Assets()),
                ("/console/{name}", lambda runtime: console.Assets()),
            )
        ),
        *(
            Route(
                path,
                partial(api, read_only=False),
                OPERATOR,
                CONSOLE,
                Unlisted("the console page's own JSON, shaped for it; /v1 is the API"),
                read_only=partial(api, read_only=True),
            )
            for path, api in (
                ("/console/api/overview", console.OverviewApi),
                ("/console/api/lists/{table}", console.ListApi),
                ("/console/api/entities/{kind}/{entity_id}", console.EntityApi),
                ("/console/api/log", console.LogApi),
                ("/console/api/export", console.ExportApi),
            )
        ),
    ]
)
