"""The Falcon WSGI application factory. No IO at import or construction: the runtime opens
the log lazily, per process, on the first request that needs it; ``/ping``, the agent card,
``/openapi.json``, ``/v1/machines`` with the operator token and any refused request without
a token never do (design.md §4.2, lazy activation). The routes, and what the middlewares decide
for each (its error surface, the lease in shared-volume mode, its access), come from the one
route table, ``adapters.http.routes``."""

from __future__ import annotations

import logging
import os
from typing import Any

import falcon

from adapters.http import auth, errors, media, refusals
from adapters.http.ports import ServerRuntime
from adapters.http.routes import ROUTES
from adapters.http.routing import Routes
from adapters.system import tracing

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


class ServerSpans:
    """Middleware, only while traces are exported (ADR 0059): a server span per request,
    named by its method and route template from the route table, a child of the caller's
    ``traceparent`` (with its ``tracestate`` and ``baggage``) if it sent one. The span is
    current while the request is handled, so a job it starts is a child of it. ``/ping`` has
    none: the platform asks it every few seconds, and it does no work worth a trace."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.path == "/ping":
            return
        carrier = {key: req.get_header(key) or "" for key in tracing.CARRIER_KEYS}
        span = tracing.start(
            req.method,
            carrier=carrier,
            kind="server",
            attributes={"http.request.method": req.method},
        )
        scope = tracing.activated(span)
        scope.__enter__()
        req.context.trace = (span, scope)

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        trace = req.context.get("trace")
        if trace is None:
            return
        span, _ = trace
        if req.uri_template:
            span.rename(f"{req.method} {req.uri_template}")
            span.set("http.route", req.uri_template)

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, succeeded: bool
    ) -> None:
        trace = req.context.get("trace")
        if trace is None:
            return
        span, scope = trace
        status = resp.status_code
        span.set("http.response.status_code", status)
        if status >= 500:
            span.fail(f"HTTP {status}")
        span.end()
        scope.__exit__(None, None, None)
        req.context.trace = None


class SharedVolumeGate:
    """Middleware, in shared-volume mode only (ADRs 0035, 0042): every route but those the
    table lets answer without the lease (``/ping`` and the agent card) first holds the lease,
    so a server that does not hold it answers lease-busy without opening the log, reads
    included. Before authentication, which may look a run token up in the log.

    Lease-busy keeps each surface's contract: the JSON-RPC endpoint answers HTTP 200 with the
    -32603 error and the request's ``id`` (the body is read for it, never the log), as it does
    in every mode; the others the 503 in the route's shape. Installed too while the mode is
    pending (off at boot, decided by the mount): each request judges it again until this
    process opens the log (``Runtime.judge_volume_again``)."""

    def __init__(self, runtime: ServerRuntime, routes: Routes) -> None:
        self.runtime = runtime
        self.routes = routes

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        route = self.routes.get(req.uri_template or "")
        if resource is None or (route is not None and not route.holds_lease):
            return
        self.runtime.judge_volume_again()
        if not self.runtime.config.shared_volume:
            return
        if route is not None and route.errors is errors.JSON_RPC and req.method == "POST":
            # The JSON-RPC endpoint answers lease-busy itself, in its shape.
            if not resource.hold_or_answer_busy(req, resp):
                resp.complete = True  # answered: no authentication, no responder
            return
        errors.holding_lease(self.runtime.ensure_lease)


def create_app(
    runtime: ServerRuntime, routes: Routes = ROUTES
) -> falcon.App[falcon.Request, falcon.Response]:
    """The server's app: ``routes`` (the table; a test may pass its own) behind the error
    surface, the shared-volume gate (when the mode is on or pending) and authentication."""
    audit = refusals.RefusalAudit(runtime)  # refused spawns and controls, on the record
    middleware: list[Any] = [errors.ErrorSurface(routes.surfaces()), WorkerHeader(), audit]
    if tracing.enabled():  # off: not even installed
        middleware.insert(0, ServerSpans())
    volume = runtime.config.volume
    if runtime.config.shared_volume or (volume is not None and volume.is_pending):
        middleware.append(SharedVolumeGate(runtime, routes))
    middleware.append(auth.Authentication(runtime, routes.access()))
    app = falcon.App(middleware=middleware)
    media.install(app)  # resp.media and req.get_media() go through the one msgspec codec
    routes.mount(app, runtime)
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
