"""The Falcon WSGI application factory. No IO at import or construction: the runtime opens
the log lazily, per process, on the first request that needs it; ``/ping``, the agent card,
``/openapi.json``, ``/v1/machines`` with the operator token and any refused request without
a token never do (design.md §4.2, lazy activation). ``auth.Authentication`` guards ``/v1`` and
``/console/api``."""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import Any

import falcon

from adapters.http import (
    agentcore,
    auth,
    channel,
    console,
    coordination,
    errors,
    media,
    metrics,
    openapi,
    proofs,
    v1,
)
from adapters.http.a2a import card, jsonrpc, push, result_files
from adapters.services.runtime import Runtime

log = logging.getLogger("foldline.http")


def _unexpected(
    req: falcon.Request, resp: falcon.Response, ex: Exception, params: dict[str, Any]
) -> None:
    if isinstance(ex, falcon.HTTPError):  # falcon's own (404 route, 405 method): keep them
        raise ex
    log.exception("unhandled error on %s %s", req.method, req.path)
    resp.status = falcon.HTTP_500
    resp.media = {"error": "internal error; the server log has the details"}


class WorkerHeader:
    """``X-Foldline-Worker: <pid>`` on every answer: which worker process served it."""

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, succeeded: bool
    ) -> None:
        resp.set_header("X-Foldline-Worker", str(os.getpid()))


class SharedVolumeGate:
    """Middleware, in shared-volume mode only (ADRs 0035, 0042): every route but ``/ping``
    and the agent card first holds the lease, so a server that does not hold it answers
    lease-busy without opening the log, reads included. Before authentication, which may
    look a run token up in the log.

    Lease-busy keeps each surface's contract: the JSON-RPC endpoint answers HTTP 200 with the
    -32603 error and the request's ``id`` (the body is read for it, never the log), as it does
    in every mode; the others the 503 in the route's shape. Installed too while the mode is
    pending (off at boot, decided by the mount): each request judges it again until this
    process opens the log (``Runtime.judge_volume_again``)."""

    OPEN = ("/ping", "/.well-known/agent-card.json")

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if resource is None or req.uri_template in self.OPEN:
            return
        self.runtime.judge_volume_again()
        if not self.runtime.config.shared_volume:
            return
        if isinstance(resource, jsonrpc.JsonRpc) and req.method == "POST":
            if not resource.hold_or_answer_busy(req, resp):
                resp.complete = True  # answered: no authentication, no responder
            return
        errors.holding_lease(self.runtime.ensure_lease)


def create_app(runtime: Runtime) -> falcon.App[falcon.Request, falcon.Response]:
    middleware: list[Any] = [errors.ErrorSurface(), WorkerHeader()]
    volume = runtime.config.volume
    if runtime.config.shared_volume or (volume is not None and volume.is_pending):
        middleware.append(SharedVolumeGate(runtime))
    middleware.append(auth.Authentication(runtime))
    app = falcon.App(middleware=middleware)
    # What the outbox's deliveries send (ADR 0039): a result's files as parts, as every other
    # answer sends them (inline, or URLs on FOLDLINE_PUBLIC_URL; never this server's bind
    # address, which no receiver elsewhere reaches).
    files = result_files.parts_for(runtime)
    runtime.push_payload = partial(push.payload, files=files)
    media.install(app)  # resp.media and req.get_media() go through the one msgspec codec
    app.add_route("/ping", agentcore.Ping(runtime))
    app.add_route("/invocations", agentcore.Invocations(runtime))
    app.add_route("/", jsonrpc.JsonRpc(runtime))
    app.add_route("/.well-known/agent-card.json", card.AgentCard(runtime))
    app.add_route("/a2a/tasks/{task_id}/files/{n}", result_files.TaskFile(runtime))
    app.add_route("/v1/sessions", v1.SessionsCollection(runtime))
    app.add_route("/v1/sessions/{session_id}", v1.SessionItem(runtime))
    app.add_route("/v1/sessions/{session_id}/taint", v1.SessionTaint(runtime))
    app.add_route("/v1/sessions/{session_id}/{action}", v1.SessionControl(runtime))
    app.add_route("/v1/jobs", Jobs(runtime))
    app.add_route("/v1/jobs/wait", coordination.Waiting(runtime))
    app.add_route("/v1/jobs/{job_id}", v1.JobItem(runtime))
    app.add_route("/v1/jobs/{job_id}/result", coordination.Result(runtime))
    app.add_route("/v1/jobs/{job_id}/result/{disposition}", coordination.Disposition(runtime))
    app.add_route("/v1/jobs/{job_id}/patch", coordination.Patch(runtime))
    channel.mount(app, runtime)  # literal segments: steer, ... win over {action}
    app.add_route("/v1/jobs/{job_id}/{action}", v1.JobControl(runtime))
    app.add_route("/v1/tasks/{task_id}", v1.TaskItem(runtime))
    app.add_route("/v1/leases", v1.Leases(runtime))
    app.add_route("/v1/streams/{stream_id}/events", v1.StreamEvents(runtime))
    app.add_route("/v1/events", v1.Events(runtime))
    app.add_route("/v1/machines", v1.MachinesResource())
    app.add_route("/v1/checkpoint", proofs.Checkpoint(runtime))
    app.add_route("/v1/proofs/inclusion", proofs.InclusionProof(runtime))
    app.add_route("/v1/proofs/consistency", proofs.ConsistencyProof(runtime))
    app.add_route("/openapi.json", OpenApi(sorted(runtime.config.agents.commands)))
    app.add_route("/metrics", metrics.Metrics(runtime))
    console.mount(app, runtime)
    app.set_error_serializer(_falcon_error)
    app.add_error_handler(Exception, _unexpected)
    app.add_error_handler(errors.HANDLED, errors.handle)  # in the shape of the route's surface
    return app


def _falcon_error(req: falcon.Request, resp: falcon.Response, ex: falcon.HTTPError) -> None:
    """Falcon's own errors (unknown route, wrong method, ...) in foldline's error shape; an
    unknown path answers exactly what AgentCore callers expect."""
    if isinstance(ex, falcon.HTTPRouteNotFound):
        media.json_response(resp, {"error": "not found"})
        return
    code = (ex.title or "error").lower().replace(" ", "_")
    media.json_response(
        resp, {"error": {"code": code, "message": ex.description or ex.title or ""}}
    )


class Jobs(v1.JobsCollection, coordination.Spawning):
    """``/v1/jobs``: GET lists (``?session=``, ``?state=``, ``?parent=``), POST spawns."""


class OpenApi:
    def __init__(self, agents: list[str]) -> None:
        self.agents = agents

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = openapi.document(self.agents)
