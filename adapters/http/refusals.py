"""Refusals on the record (ADR 0065), at the HTTP error boundary: a middleware that hands
every refused spawn, control and integrate to the session's audit stream
(``adapters.services.refusals``), after the refusal was answered.

Generic by design: whatever refused the request (the rules' ``Forbidden`` or
``AdmissionRejected``, the machine's ``InvalidTransition``, an ``If-Match`` that names a stale
version, the adapter's own 403s, and any refusal added later) is recorded by its status and its
stable code, which ``errors.handle`` leaves on the request. A refusal the middleware cannot
tie to a session (an unknown job, a caller that never authenticated) is not recorded.
"""

from __future__ import annotations

from typing import Any

import falcon

from adapters.http import auth
from adapters.http.errors import ApiError
from adapters.http.ports import ServerRuntime
from adapters.services.refusals import RefusalRecorder
from engine import errors as e
from engine.domain.refusals import RecordRefusal

# What the refused requests were: the POST routes of spawns, judging, integrating and controls.
SPAWN, CONTROL, INTEGRATE = "spawn", "control", "integrate"
REFUSED = frozenset({403, 409, 412, 428, 429})
MAX_FIELD = 1000


def action_of(template: str, params: dict[str, Any]) -> str | None:
    """The audited action of a POST to ``template``; None for any other route."""
    if template == "/v1/jobs":
        return SPAWN
    if template == "/v1/jobs/{job_id}/result/{disposition}":
        disposition = str(params.get("disposition", ""))
        return INTEGRATE if disposition.startswith("integrate") else CONTROL
    if template.startswith("/v1/jobs/{job_id}/") or template.startswith(
        "/v1/sessions/{session_id}/"
    ):
        return CONTROL
    return None


def control_of(template: str, params: dict[str, Any], action: str) -> str:
    """Which control was refused: the route's ``action`` or ``disposition``, or the last
    word of a channel control's route (``/v1/jobs/{job_id}/steer``); "" for a spawn."""
    if action == SPAWN:
        return ""
    named = params.get("action") or params.get("disposition")
    return str(named or template.rsplit("/", 1)[-1])[:200]


def _refusal_of(error: Exception | None) -> tuple[str, str, dict[str, str]]:
    """The error's stable code, message and fields (as text)."""
    if isinstance(error, (ApiError, e.EngineError)):
        code, message, fields = error.code, error.message, error.fields
    else:
        return "refused", "", {}
    limits = {str(k)[:200]: str(v)[:MAX_FIELD] for k, v in list(fields.items())[:20]}
    return code[:200], message[:MAX_FIELD], limits


class RefusalAudit:
    """Middleware of the writing server: after a refused audited request, record it."""

    def __init__(self, runtime: ServerRuntime, recorder: RefusalRecorder | None = None) -> None:
        self.runtime = runtime
        self.recorder = recorder or RefusalRecorder(self._write)

    def _write(self, command: RecordRefusal) -> None:
        self.runtime.ensure_lease()
        self.runtime.handle(command)

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        if req.method != "POST" or resource is None or resp.status_code not in REFUSED:
            return
        params = req.context.get("audit_params") or {}
        action = action_of(req.uri_template or "", params)
        caller: auth.Caller | None = req.context.get("caller")
        if action is None or caller is None:
            return
        where = self._where(req, params, caller)
        if where is None:
            return
        session_id, target, agent = where
        code, message, limits = _refusal_of(req.context.get("refusal"))
        self.recorder.record(
            RecordRefusal(
                session_id=session_id,
                action=action,
                control=control_of(req.uri_template or "", params, action),
                code=code,
                status=resp.status_code,
                message=message,
                caller=caller.job_id or "operator",
                target=target,
                agent=agent[:MAX_FIELD],
                route=f"POST {req.uri_template}"[:200],
                limits=limits,
            )
        )

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        req.context.audit_params = dict(params)  # the responder's arguments, for the record

    def _where(
        self, req: falcon.Request, params: dict[str, Any], caller: auth.Caller
    ) -> tuple[str, str, str] | None:
        """(session, target job, agent) of the refused request; None when unknown."""
        if "job_id" in params:
            job = self.runtime.reads.job(str(params["job_id"]))
            return None if job is None else (job.session_id, job.job_id, job.agent)
        if "session_id" in params:
            return str(params["session_id"]), "", ""
        spawn: tuple[str, str] | None = req.context.get("spawn")  # (session, agents)
        if spawn is not None and spawn[0]:
            return spawn[0], "", spawn[1]
        return (caller.session_id, "", "") if caller.session_id else None
