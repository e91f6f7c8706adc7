"""The Falcon WSGI application factory. No IO at import or construction: the runtime opens
the log lazily, per process, on the first request."""

from __future__ import annotations

import logging
from typing import Any

import falcon

from adapters.http import a2a, agentcore
from adapters.runtime import Runtime
from engine.errors import EngineError

log = logging.getLogger("foldline.http")


def _unexpected(
    req: falcon.Request, resp: falcon.Response, ex: Exception, params: dict[str, Any]
) -> None:
    if isinstance(ex, falcon.HTTPError):  # falcon's own (404 route, 405 method): keep them
        raise ex
    log.exception("unhandled error on %s %s", req.method, req.path)
    resp.status = falcon.HTTP_500
    resp.media = {"error": "internal error; the server log has the details"}


def create_app(runtime: Runtime) -> falcon.App:
    app = falcon.App()
    app.add_route("/ping", agentcore.Ping(runtime))
    app.add_route("/invocations", agentcore.Invocations(runtime))
    app.add_route("/", a2a.JsonRpc(runtime))
    app.add_route("/.well-known/agent-card.json", a2a.AgentCard(runtime))
    app.add_error_handler(Exception, _unexpected)
    app.add_error_handler(EngineError, agentcore.handle_engine_error)
    app.add_error_handler(agentcore.HttpError, agentcore.handle_http_error)
    return app
