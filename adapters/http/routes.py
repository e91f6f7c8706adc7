"""The route table: every route of the server, once (``adapters.http.routing.Route``).

An entry is a URI template, the resource the server makes for it, its ``Access``, the surface
that writes its errors, the read-only console's resource if ``foldline console DB`` serves it,
and whether the shared-volume gate lets it answer without the lease. The server, the
read-only console, the authentication and the gate are all built from ``ROUTES``: a new route
is a new entry (and its resource). Falcon tries literal segments before fields whatever the
order.
"""

from __future__ import annotations

from functools import partial

import falcon

from adapters.http import (
    agentcore,
    channel,
    console,
    coordination,
    metrics,
    openapi,
    proofs,
    v1,
)
from adapters.http.a2a import card, jsonrpc, result_files
from adapters.http.auth import Access
from adapters.http.errors import AGENTCORE, CONSOLE, INVOCATIONS, JSON_RPC, V1
from adapters.http.routing import Route, Routes
from adapters.services.runtime import Runtime

OPEN, RUN, OPERATOR = Access.OPEN, Access.RUN, Access.OPERATOR


class OpenApi:
    """``/openapi.json``: the document, for this server's agents."""

    def __init__(self, runtime: Runtime) -> None:
        self.agents = sorted(runtime.config.agents.commands)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = openapi.document(self.agents)


ROUTES = Routes(
    [
        Route("/v1/sessions", v1.SessionsCollection, RUN, V1, read_only=v1.SessionsCollection),
        Route("/v1/sessions/{session_id}", v1.SessionItem, RUN, V1, read_only=v1.SessionItem),
        Route("/v1/sessions/{session_id}/{action}", v1.SessionControl, OPERATOR, V1),
        Route("/v1/sessions/{session_id}/taint", v1.SessionTaint, OPERATOR, V1),
        Route(
            "/v1/jobs",
            coordination.Jobs,
            RUN,
            V1,
            read_only=v1.JobsCollection,  # lists; the console spawns nothing
        ),
        Route("/v1/jobs/wait", coordination.Waiting, RUN, V1),
        Route("/v1/jobs/{job_id}/result", coordination.Result, RUN, V1),
        Route("/v1/jobs/{job_id}", v1.JobItem, RUN, V1, read_only=v1.JobItem),
        Route("/v1/jobs/{job_id}/result/{disposition}", coordination.Disposition, RUN, V1),
        Route("/v1/jobs/{job_id}/patch", coordination.Patch, RUN, V1),
        *(
            Route(
                f"/v1/jobs/{{job_id}}/{action}",
                partial(channel.ControlAction, action=action),
                RUN,  # the operator or an ancestor's live run: the rules check which
                V1,
            )
            for action in channel.BODIES
        ),
        Route("/v1/jobs/{job_id}/controls", channel.Controls, RUN, V1, read_only=channel.Controls),
        Route("/v1/jobs/{job_id}/{action}", v1.JobControl, OPERATOR, V1),
        Route("/v1/tasks/{task_id}", v1.TaskItem, RUN, V1, read_only=v1.TaskItem),
        Route("/v1/leases", v1.Leases, OPERATOR, V1, read_only=v1.Leases),
        Route(
            "/v1/streams/{stream_id}/events",
            v1.StreamEvents,
            RUN,
            V1,
            read_only=v1.StreamEvents,
        ),
        Route("/v1/events", v1.Events, OPERATOR, V1, read_only=v1.Events),
        Route(
            "/v1/machines",
            lambda runtime: v1.MachinesResource(),
            RUN,
            V1,
            read_only=lambda runtime: v1.MachinesResource(),
        ),
        # Public by design (ADR 0040): a signed note, and proofs that hold only hashes and sizes.
        Route("/v1/checkpoint", proofs.Checkpoint, OPEN, V1),
        Route("/v1/proofs/inclusion", proofs.InclusionProof, OPEN, V1),
        Route("/v1/proofs/consistency", proofs.ConsistencyProof, OPEN, V1),
        # The AgentCore and A2A contracts: open, their platform authenticates callers.
        Route("/ping", agentcore.Ping, OPEN, AGENTCORE, holds_lease=False),
        Route(
            "/.well-known/agent-card.json", card.AgentCard, OPEN, AGENTCORE, holds_lease=False
        ),
        Route("/invocations", agentcore.Invocations, OPEN, INVOCATIONS),
        Route("/", jsonrpc.JsonRpc, OPEN, JSON_RPC),
        Route(
            "/a2a/tasks/{task_id}/files/{n}",
            result_files.TaskFile,
            OPEN,  # as A2A is: its platform authenticates callers (a2a.md)
            V1,
        ),
        Route("/openapi.json", OpenApi, OPEN, AGENTCORE),
        Route("/metrics", metrics.Metrics, OPEN, AGENTCORE),
        # The console: its pages are open, their JSON is the operator's (the whole log).
        *(
            Route(path, make, OPEN, CONSOLE, read_only=make)
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
