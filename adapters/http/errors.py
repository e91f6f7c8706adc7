"""Every error an HTTP surface answers, from one place: the adapter's own error type, the table
from each error class to an HTTP status (and, for A2A, to a JSON-RPC error code), and the
surfaces that write them.

The route table (``adapters.http.routes``) names each route's ``Surface``; the
``ErrorSurface`` middleware records it for the request and ``handle`` writes whatever escaped
the responder in that shape, so no handler looks at the path to decide. A test asserts that no
``EngineError`` class is missing from ``STATUS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import falcon

from adapters.http import media
from adapters.services import task_messages
from adapters.services.dispatch import DispatchFailed
from adapters.services.recovery import RecoveryFailed
from adapters.settings.config import LEASE_BUSY_TEXT
from engine import errors as e
from engine.domain import errors as d
from projections.console_queries import QueryError


class ApiError(Exception):
    """The adapters' own refusal: an HTTP ``status``, a stable ``code``, a ``message`` and the
    fields that go with it. The route's surface picks the body: ``/v1`` and the console send
    ``{"error": {"code", "message", ...fields}}``, AgentCore ``{"error": message, ...fields}``."""

    def __init__(self, status: str, code: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.fields = status, code, message, fields


# -- /v1 (and the status of every engine error) -----------------------------------------------

STATUS: dict[type[e.EngineError], str] = {
    e.EngineError: falcon.HTTP_500,
    e.InvalidArgument: falcon.HTTP_400,
    e.InvalidEvent: falcon.HTTP_400,
    e.UnknownEventType: falcon.HTTP_400,
    e.UnknownStreamKind: falcon.HTTP_404,
    e.OutOfRange: falcon.HTTP_404,
    e.PayloadTooLarge: falcon.HTTP_413,
    e.InvalidDeclaration: falcon.HTTP_500,
    e.ConcurrencyError: falcon.HTTP_412,
    e.InvalidTransition: falcon.HTTP_409,
    e.MissingGuard: falcon.HTTP_500,  # audits only: a recorded guard the code lacks
    e.FencedOut: falcon.HTTP_503,
    e.SchemaTooNew: falcon.HTTP_500,
    e.NotALog: falcon.HTTP_500,
    e.StorageError: falcon.HTTP_503,
    e.StorageFull: falcon.HTTP_507,
    e.LogMissing: falcon.HTTP_503,
    e.ChainBroken: falcon.HTTP_500,
    d.NotFound: falcon.HTTP_404,
    d.AlreadyExists: falcon.HTTP_409,
    d.Conflict: falcon.HTTP_409,
    d.AdmissionRejected: falcon.HTTP_429,
    d.Unauthorized: falcon.HTTP_401,
    d.Forbidden: falcon.HTTP_403,
    d.NotGranted: falcon.HTTP_403,
    d.StaleRevision: falcon.HTTP_412,
    d.LeaseBusy: falcon.HTTP_503,
    d.NotLeaseHolder: falcon.HTTP_409,
    d.SessionNotFound: falcon.HTTP_404,
    d.TaskNotFound: falcon.HTTP_404,
    d.TaskEnded: falcon.HTTP_409,
    d.TaskMoved: falcon.HTTP_409,
    d.SessionMoved: falcon.HTTP_409,
    d.NoChannel: falcon.HTTP_409,
    d.StaleTurn: falcon.HTTP_409,
    d.UnknownRequest: falcon.HTTP_409,
    e.NeedsMigration: falcon.HTTP_500,
    RecoveryFailed: falcon.HTTP_503,
}


# A storage fault that passes by itself (space freed, a lock released): when to try again.
RETRY_AFTER_S = 5


def retry_after(error: e.EngineError) -> str | None:
    """``Retry-After`` for a storage fault that may pass by itself; None for anything else,
    a log that is gone included (it does not come back without an operator)."""
    if isinstance(error, e.StorageError) and not isinstance(error, e.LogMissing):
        return str(RETRY_AFTER_S)
    return None


def _most_specific(table: dict[type[Any], Any], error: BaseException) -> Any:
    for cls in type(error).__mro__:
        if cls in table:
            return table[cls]
    return None


def status_of(error: e.EngineError) -> str:
    """The status of the most specific class in the table."""
    return _most_specific(STATUS, error) or falcon.HTTP_500


Refusal = Callable[[Any], ApiError]

# Where ``/v1`` words an error otherwise than the engine does: the refusal it answers instead
# (a busy workspace says what to do about it, a job that could not reach its runner is no
# engine error). Every other engine error answers its ``STATUS``, ``code`` and ``message``.
V1_ERRORS: dict[type[Exception], Refusal] = {
    d.LeaseBusy: lambda ex: ApiError(falcon.HTTP_503, "lease_busy", LEASE_BUSY_TEXT),
    DispatchFailed: lambda ex: ApiError(falcon.HTTP_500, "dispatch_failed", str(ex)),
}


def holding_lease(hold: Callable[[], None]) -> None:
    """Run ``hold`` (taking the workspace lease); a busy workspace becomes the one fixed
    lease-busy refusal, which every surface writes in its shape (the shared-volume gate, ADRs
    0035 and 0042). The JSON-RPC endpoint answers its own: -32603 from ``RPC_ERRORS`` in HTTP
    200, with the request's id (``adapters.http.a2a.jsonrpc.JsonRpc.hold_or_answer_busy``)."""
    try:
        hold()
    except d.LeaseBusy as ex:
        raise V1_ERRORS[d.LeaseBusy](ex) from None


# What the console's reads answer a query they cannot run (a filter, a cursor), in the shape of
# its refusals; its engine errors keep the AgentCore shape (``CONSOLE``).
CONSOLE_ERRORS: dict[type[Exception], Refusal] = {
    QueryError: lambda ex: ApiError(falcon.HTTP_400, "invalid_argument", str(ex)),
}


# -- AgentCore ``/invocations`` ------------------------------------------------------------------

Body = Callable[[Any], dict[str, Any]]


def _with_code(ex: e.EngineError) -> dict[str, Any]:
    return {"error": ex.message, "code": ex.code}


# What a dispatch refusal answers on ``/invocations``, as the source system did: a busy
# workspace with the session hint, admission with its limits, a malformed request a 400. Every
# other engine error follows the AgentCore rule (``_agentcore_failure``).
INVOCATION_STATUS: dict[type[Exception], tuple[str, Body]] = {
    d.LeaseBusy: (falcon.HTTP_503, lambda ex: {"error": LEASE_BUSY_TEXT}),
    DispatchFailed: (falcon.HTTP_500, lambda ex: {"error": str(ex)}),
    d.Conflict: (falcon.HTTP_409, _with_code),
    e.InvalidTransition: (falcon.HTTP_409, _with_code),
    d.AlreadyExists: (falcon.HTTP_409, _with_code),
    d.AdmissionRejected: (falcon.HTTP_429, lambda ex: {"error": ex.message, **ex.fields}),
    e.InvalidArgument: (falcon.HTTP_400, _with_code),  # an unknown agent, a role's shape
}


# -- A2A JSON-RPC ---------------------------------------------------------------------------------

PARSE, INVALID_REQUEST, NO_METHOD, INVALID_PARAMS, INTERNAL = -32700, -32600, -32601, -32602, -32603
TASK_NOT_FOUND, NOT_CANCELABLE, UNSUPPORTED = -32001, -32002, -32004
CONTENT_TYPE_UNSUPPORTED, VERSION_UNSUPPORTED = -32005, -32009
EXTENDED_CARD_NOT_CONFIGURED = -32007
UNAUTHENTICATED = -32000  # foldline's: the operator token is missing or wrong (no A2A code)


# The ``google.rpc.ErrorInfo`` reason of each code (A2A 1.0 §9.5): what a 1.0 client reads
# besides the code. foldline's own code (-32000) has a reason of its own, in its own domain.
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
A2A_DOMAIN, FOLDLINE_DOMAIN = "a2a-protocol.org", "foldline"
REASONS: dict[int, tuple[str, str]] = {
    PARSE: ("PARSE_ERROR", A2A_DOMAIN),
    INVALID_REQUEST: ("INVALID_REQUEST", A2A_DOMAIN),
    NO_METHOD: ("METHOD_NOT_FOUND", A2A_DOMAIN),
    INVALID_PARAMS: ("INVALID_PARAMS", A2A_DOMAIN),
    INTERNAL: ("INTERNAL_ERROR", A2A_DOMAIN),
    TASK_NOT_FOUND: ("TASK_NOT_FOUND", A2A_DOMAIN),
    NOT_CANCELABLE: ("TASK_NOT_CANCELABLE", A2A_DOMAIN),
    -32003: ("PUSH_NOTIFICATION_NOT_SUPPORTED", A2A_DOMAIN),
    UNSUPPORTED: ("UNSUPPORTED_OPERATION", A2A_DOMAIN),
    CONTENT_TYPE_UNSUPPORTED: ("CONTENT_TYPE_NOT_SUPPORTED", A2A_DOMAIN),
    -32006: ("INVALID_AGENT_RESPONSE", A2A_DOMAIN),
    EXTENDED_CARD_NOT_CONFIGURED: ("EXTENDED_AGENT_CARD_NOT_CONFIGURED", A2A_DOMAIN),
    -32008: ("EXTENSION_SUPPORT_REQUIRED", A2A_DOMAIN),
    VERSION_UNSUPPORTED: ("VERSION_NOT_SUPPORTED", A2A_DOMAIN),
    UNAUTHENTICATED: ("UNAUTHENTICATED", FOLDLINE_DOMAIN),
}


class RpcError(ApiError):
    """A JSON-RPC error answer (HTTP 200, as the client insists). ``data`` is what the error
    says beyond its code and message (string values: foldline's stable ``code`` for a server
    fault, the id of what was not found): in the 1.0 dialect the ``metadata`` of the error's
    one ``ErrorInfo``, in 0.3 (which defines no detail) the ``data`` member itself, if any."""

    def __init__(self, code: int, message: str, data: dict[str, str] | None = None) -> None:
        super().__init__(falcon.HTTP_200, "rpc_error", message)
        self.rpc_code, self.data = code, data

    def to_dict(self, legacy: bool = False) -> dict[str, Any]:
        """The error object, in the 1.0 dialect unless ``legacy`` (0.3)."""
        error: dict[str, Any] = {"code": self.rpc_code, "message": self.message}
        if legacy:
            if self.data is not None:
                error["data"] = self.data
            return error
        reason, domain = REASONS[self.rpc_code]
        info = {"@type": ERROR_INFO, "reason": reason, "domain": domain}
        error["data"] = [{**info, "metadata": dict(self.data or {})}]
        return error


# Where in a JSON-RPC method an error was caught: anywhere (``None``: the method's handler let
# it through), or one step of a method, whose code passes what it caught to ``rpc_error`` with
# the step's name; a step's row comes before the row for anywhere of the same class.
# The steps of accepting a message are its use case's (services.task_messages.MessageRefused).
MESSAGE = task_messages.MESSAGE  # where an A2A message goes: its context, its task
AGENT = task_messages.AGENT  # the agent the message names
LAUNCH = task_messages.LAUNCH  # starting the message's run, or delivering it into one
CANCEL = "cancel"  # CancelTask's command
PUSH = "push"  # a push config's command (a2a.push)

RpcAnswer = Callable[[Any], RpcError]

# Every error a JSON-RPC call answers as a JSON-RPC error, not an HTTP one. Anywhere: the
# server's own faults (a full disk, ...) with the stable code in ``data``, and a busy workspace.
# Any other engine error a method lets through is the HTTP surface's.
RPC_ERRORS: dict[tuple[type[Exception], str | None], RpcAnswer] = {
    (e.StorageError, None): lambda ex: RpcError(INTERNAL, ex.message, {"code": ex.code}),
    (d.LeaseBusy, None): lambda ex: RpcError(INTERNAL, LEASE_BUSY_TEXT, {"code": "lease_busy"}),
    (d.SessionNotFound, MESSAGE): lambda ex: RpcError(
        INVALID_PARAMS, f"unknown contextId {ex.fields['session_id']}"
    ),
    (d.TaskNotFound, MESSAGE): lambda ex: RpcError(
        TASK_NOT_FOUND,
        f"Task {ex.fields['task_id']} not found in this context",
        {"taskId": ex.fields["task_id"]},
    ),
    (d.TaskEnded, MESSAGE): lambda ex: RpcError(
        UNSUPPORTED, f"Task {ex.fields['task_id']} is in terminal state"
    ),
    # Raised again after every retry the message had (task_messages.RETRIES).
    (d.TaskMoved, MESSAGE): lambda ex: RpcError(
        INTERNAL, "the task kept changing under this message; send it again"
    ),
    (task_messages.ReplayDiffers, MESSAGE): lambda ex: RpcError(
        INVALID_PARAMS,
        ex.message,
        {"messageId": ex.fields["message_id"], "differs": ",".join(ex.fields["differs"])},
    ),
    (e.InvalidArgument, AGENT): lambda ex: RpcError(INVALID_PARAMS, ex.message),
    (DispatchFailed, LAUNCH): lambda ex: RpcError(INTERNAL, f"Dispatch failed on the remote: {ex}"),
    (e.EngineError, LAUNCH): lambda ex: RpcError(UNSUPPORTED, ex.message),
    (e.EngineError, CANCEL): lambda ex: RpcError(NOT_CANCELABLE, ex.message),
    (d.NotFound, PUSH): lambda ex: RpcError(TASK_NOT_FOUND, ex.message),
    (d.TaskEnded, PUSH): lambda ex: RpcError(UNSUPPORTED, ex.message),
}


def rpc_error(error: Exception, step: str | None = None) -> RpcError | None:
    """The JSON-RPC answer for ``error`` caught at ``step``, or None when it is no JSON-RPC
    error: the most specific class with a row, the step's row before the row for anywhere."""
    for cls in type(error).__mro__:
        for key in ((cls, step), (cls, None)):
            if key in RPC_ERRORS:
                return RPC_ERRORS[key](error)
    return None


def as_rpc(error: Exception, step: str) -> Exception:
    """What to raise for ``error`` caught at ``step``: its JSON-RPC answer, or ``error`` itself
    when the table has none."""
    return rpc_error(error, step) or error


# -- surfaces: how a family of routes writes an error ------------------------------------------


def answer(resp: falcon.Response, status: str, code: str, message: str, **fields: Any) -> None:
    resp.status = status
    media.json_response(resp, {"error": {"code": code, "message": message, **fields}})


def _v1_refusal(resp: falcon.Response, ex: ApiError) -> None:
    answer(resp, ex.status, ex.code, ex.message, **ex.fields)
    if ex.status == falcon.HTTP_401:
        resp.set_header("WWW-Authenticate", "Bearer")


def _v1_failure(resp: falcon.Response, ex: Exception) -> None:
    if (refusal := _most_specific(V1_ERRORS, ex)) is not None:
        _v1_refusal(resp, refusal(ex))
        return
    if not isinstance(ex, e.EngineError):  # a console query's: no /v1 route runs one
        raise ex
    answer(resp, status_of(ex), ex.code, ex.message, **_jsonable(ex.fields))
    if (seconds := retry_after(ex)) is not None:
        resp.set_header("Retry-After", seconds)


def _agentcore_refusal(resp: falcon.Response, ex: ApiError) -> None:
    resp.status = ex.status
    resp.media = {"error": ex.message, **ex.fields}


def _agentcore_failure(resp: falcon.Response, ex: Exception) -> None:
    """An engine error in the AgentCore shape. The server's own trouble keeps its status from
    ``STATUS`` (a full disk 507, a storage fault or a log that is gone 503, with
    ``Retry-After`` when it passes by itself): a caller must not read it as a fault of its
    request. Every other refusal is a 409, as the AgentCore contract has it."""
    if not isinstance(ex, e.EngineError):  # a job that could not reach its runner
        resp.status = falcon.HTTP_500
        resp.media = {"error": str(ex)}
        return
    status = status_of(ex)
    resp.status = status if status.startswith("5") else falcon.HTTP_409
    if (seconds := retry_after(ex)) is not None:
        resp.set_header("Retry-After", seconds)
    resp.media = _with_code(ex)


def _console_failure(resp: falcon.Response, ex: Exception) -> None:
    if (refusal := _most_specific(CONSOLE_ERRORS, ex)) is not None:
        _v1_refusal(resp, refusal(ex))
        return
    _agentcore_failure(resp, ex)


def _invocation_failure(resp: falcon.Response, ex: Exception) -> None:
    found = _most_specific(INVOCATION_STATUS, ex)
    if found is None:
        _agentcore_failure(resp, ex)
        return
    status, body = found
    resp.status = status
    resp.media = body(ex)


@dataclass(frozen=True)
class Surface:
    """How one family of routes writes an error: ``refusal`` an ``ApiError``, ``failure``
    an engine error (or a ``DispatchFailed``) the responder let through."""

    name: str
    refusal: Callable[[falcon.Response, ApiError], None]
    failure: Callable[[falcon.Response, Exception], None]


V1 = Surface("v1", _v1_refusal, _v1_failure)
AGENTCORE = Surface("agentcore", _agentcore_refusal, _agentcore_failure)
INVOCATIONS = Surface("invocations", _agentcore_refusal, _invocation_failure)
# The console's reads refuse in the /v1 shape; an engine error under them keeps the AgentCore
# shape every route outside /v1 has always answered.
CONSOLE = Surface("console", _v1_refusal, _console_failure)
# The JSON-RPC endpoint answers its own errors (``RPC_ERRORS``, HTTP 200), a busy workspace
# included, even before it holds the lease (the shared-volume gate leaves that to it); what
# it lets through keeps the AgentCore shape.
JSON_RPC = Surface("json-rpc", _agentcore_refusal, _agentcore_failure)

HANDLED = (ApiError, e.EngineError, DispatchFailed, QueryError)
"""What ``handle`` answers; anything else is the application's ``500``."""


class ErrorSurface:
    """Middleware: records the matched route's surface (``surfaces``, by URI template;
    ``AGENTCORE`` for one it does not know) for ``handle``. First in the chain, so a refusal
    by the authentication middleware is written in its route's shape too."""

    def __init__(self, surfaces: Mapping[str, Surface]) -> None:
        self.surfaces = surfaces

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        req.context.errors = self.surfaces.get(req.uri_template or "", AGENTCORE)


def handle(
    req: falcon.Request, resp: falcon.Response, error: Exception, params: dict[str, Any]
) -> None:
    """The error handler for ``HANDLED``: the request's surface writes it."""
    surface: Surface = getattr(req.context, "errors", AGENTCORE)
    req.context.refusal = error  # what refused it, for the record (``adapters.http.refusals``)
    if isinstance(error, ApiError):
        surface.refusal(resp, error)
    else:
        surface.failure(resp, error)


_SCALARS = (str, int, float, bool, type(None))


def _jsonable(fields: dict[str, Any]) -> dict[str, Any]:
    """An error's fields as JSON: scalars, and lists of them (the paths of a conflict), as
    they are; anything else as its text."""

    def one(value: Any) -> Any:
        if isinstance(value, _SCALARS):
            return value
        if isinstance(value, (list, tuple)) and all(isinstance(v, _SCALARS) for v in value):
            return list(value)
        return str(value)

    return {k: one(v) for k, v in fields.items()}
