"""One table from every ``EngineError`` class to an HTTP status, and the ``/v1`` error body
``{"error": {"code", "message", ...fields}}``. A test asserts that no class is missing."""

from __future__ import annotations

from typing import Any

import falcon

from adapters.http import media
from adapters.recovery import RecoveryFailed
from engine import errors as e
from engine.domain import errors as d

STATUS: dict[type[e.EngineError], str] = {
    e.EngineError: falcon.HTTP_500,
    e.InvalidArgument: falcon.HTTP_400,
    e.InvalidEvent: falcon.HTTP_400,
    e.UnknownEventType: falcon.HTTP_400,
    e.UnknownStreamKind: falcon.HTTP_404,
    e.PayloadTooLarge: falcon.HTTP_413,
    e.InvalidDeclaration: falcon.HTTP_500,
    e.ConcurrencyError: falcon.HTTP_412,
    e.InvalidTransition: falcon.HTTP_409,
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
    d.LeaseBusy: falcon.HTTP_503,
    d.NotLeaseHolder: falcon.HTTP_409,
    d.SessionNotFound: falcon.HTTP_404,
    d.TaskNotFound: falcon.HTTP_404,
    d.TaskEnded: falcon.HTTP_409,
    d.TaskMoved: falcon.HTTP_409,
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


def status_of(error: e.EngineError) -> str:
    """The status of the most specific class in the table."""
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return falcon.HTTP_500


class ApiError(Exception):
    """An error answered as ``{"error": {"code", "message", ...}}`` with ``status``."""

    def __init__(self, status: str, code: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.fields = status, code, message, fields


def answer(resp: falcon.Response, status: str, code: str, message: str, **fields: Any) -> None:
    resp.status = status
    media.json_response(resp, {"error": {"code": code, "message": message, **fields}})
