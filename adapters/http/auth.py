"""Who is calling: every route the table (``adapters.http.routes``) does not mark ``OPEN``
needs a bearer token.

Two kinds of caller. The operator holds the operator token (``FOLDLINE_TOKEN``, or the file
the server made at first activation) and may do everything. A running job holds the
``FOLDLINE_RUN_TOKEN`` of its current run (only its sha256 is on record, and it works only
while that run is live) and reads only its own session; of its jobs, only its own and its
descendants (``require_job``), unless its agent's ``result_visibility`` is ``session``
(ADR 0065). It spawns children there and judges its descendants (the rules check those again
inside the write transaction). Anything else is a 401.

``Authentication`` (falcon middleware) turns the request into a ``Caller`` and refuses a run
on what the table marks ``OPERATOR`` (the whole log, leases, controls, the console's JSON);
the resources that know an entity's session check a run's scope with ``require_session``.
The table keeps ``/ping``, ``/invocations``, A2A, the agent card, ``/openapi.json``,
``/metrics`` and the console's static pages open, as their contracts want them, and
``/v1/checkpoint`` and ``/v1/proofs/...`` too: an auditor needs no token.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import falcon

from adapters.http.errors import ApiError
from adapters.http.ports import ServerRuntime
from adapters.services.dispatch import token_digest
from engine.domain.agents import Visibility
from engine.domain.rows import JobRow


class Access(Enum):
    """Who may call a route (each route's is in ``adapters.http.routes``)."""

    OPEN = "open"  # no token: a contract that authenticates elsewhere, a page, an audit
    RUN = "run"  # the operator, or a live run (the resource checks the run's session)
    OPERATOR = "operator"  # the operator token only


@dataclass(frozen=True)
class Caller:
    job_id: str | None = None  # None: the operator
    session_id: str | None = None
    token_digest: str | None = None
    # Its agent's result_visibility is "session": every job of the session, not only its own
    # and its descendants (ADR 0065).
    sees_session: bool = False

    @property
    def is_operator(self) -> bool:
        return self.job_id is None


OPERATOR = Caller()


def _unauthorized() -> ApiError:
    return ApiError(
        falcon.HTTP_401, "unauthorized", "a valid operator or live run token is required"
    )


class Authentication:
    """Middleware: ``req.context.caller`` for every route that needs a token, or a 401/403
    before it runs. ``access`` is each route's, by its URI template; a template it does not
    know is the operator's (closed unless the table opens it).

    ``runtime`` needs ``operator_token.current()`` and ``reads`` (for a run token's lookup).
    """

    def __init__(self, runtime: ServerRuntime, access: Mapping[str, Access]) -> None:
        self.runtime = runtime
        self.access = access

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        # The route's template, not the raw path: the router also matches "//v1/..." (it
        # strips leading slashes), which a look at the path would have to undo.
        access = self.access.get(req.uri_template or "", Access.OPERATOR)
        if resource is None or access is Access.OPEN:
            return
        caller = self.authenticate(req)
        req.context.caller = caller  # before a refusal too: who was refused is on record
        if access is Access.OPERATOR and not caller.is_operator:
            raise ApiError(
                falcon.HTTP_403,
                "forbidden",
                "a run token reads only its own session's jobs, streams and results;"
                f" {req.method} {req.path} needs the operator token",
            )

    def authenticate(self, req: falcon.Request) -> Caller:
        """The operator (constant-time compare), else the live run whose token it is.

        Raises:
            ApiError: 401, no bearer or one nobody holds.
        """
        scheme, _, value = (req.get_header("Authorization") or "").partition(" ")
        value = value.strip()
        if scheme.lower() != "bearer" or not value:
            raise _unauthorized()
        operator = self.runtime.operator_token.current()
        if operator is not None and hmac.compare_digest(value.encode(), operator.encode()):
            return OPERATOR
        if operator is None and self.runtime.operator_token.fixed is None:
            # No token file yet: the server never activated, so no run (and no operator
            # token) exists to match; answer without opening the log.
            raise _unauthorized()
        digest = token_digest(value)
        run = self.runtime.reads.run_caller(digest)
        if run is None:
            raise _unauthorized()
        policy = self.runtime.config.agents.policies.get(run.agent)
        sees = policy is not None and policy.result_visibility == Visibility.SESSION
        return Caller(run.job_id, run.session_id, digest, sees)


class OpenReads:
    """Middleware of ``foldline console DB``: read-only and bound to loopback, so every caller
    is the operator (an auditor on this machine)."""

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        req.context.caller = OPERATOR


def caller_of(req: falcon.Request) -> Caller:
    """The caller the middleware put on the request; none (a route the middleware did not
    guard) is refused rather than trusted."""
    caller: Caller | None = req.context.get("caller")
    if caller is None:
        raise _unauthorized()
    return caller


def require_session(req: falcon.Request, session_id: str, what: str) -> Caller:
    """The caller, if it may read ``what`` (e.g. ``job j1``) of ``session_id``: the operator,
    or a run of that session.

    Raises:
        ApiError: 403 for a run of another session.
    """
    caller = caller_of(req)
    if not caller.is_operator and caller.session_id != session_id:
        raise ApiError(
            falcon.HTTP_403,
            "forbidden",
            "a run token reads only its own session's jobs, streams and results;"
            f" {what} is in another session",
        )
    return caller


class JobLookup(Protocol):
    def job(self, job_id: str) -> JobRow | None: ...

    def jobs_by_id(self, job_ids: list[str]) -> list[JobRow]: ...

    def task_jobs(self, task_id: str) -> list[str]: ...


def can_see(caller: Caller, record: JobRow, jobs: JobLookup) -> bool:
    """Whether ``caller`` reads ``record``: the operator; a run of its session whose agent
    sees the session; else only the run's own job and the jobs below it (bounded by the
    lineage's depth)."""
    if caller.is_operator:
        return True
    if caller.session_id != record.session_id:
        return False
    if caller.sees_session or record.job_id == caller.job_id:
        return True
    parent, steps = record.parent_job, record.depth
    while parent is not None and steps > 0:
        if parent == caller.job_id:
            return True
        above = jobs.job(parent)
        parent, steps = (above.parent_job if above is not None else None), steps - 1
    return False


def require_job(req: falcon.Request, record: JobRow, jobs: JobLookup) -> Caller:
    """The caller, if it may read job ``record`` (``can_see``).

    Raises:
        ApiError: 403 for a run of another session, or for a job that is not the run's own
            or below it when its agent's ``result_visibility`` is ``descendants``.
    """
    caller = require_session(req, record.session_id, f"job {record.job_id}")
    if not can_see(caller, record, jobs):
        raise ApiError(
            falcon.HTTP_403,
            "forbidden",
            f"result_visibility: a run reads its own job and its descendants; job"
            f" {record.job_id} is not below job {caller.job_id} (an agent with"
            ' result_visibility = "session" reads its whole session)',
        )
    return caller


def require_task(req: falcon.Request, task_id: str, jobs: JobLookup) -> None:
    """A run reads a task when it reads one of the task's jobs (ADR 0065).

    Raises:
        ApiError: 403 naming ``result_visibility`` otherwise.
    """
    caller = caller_of(req)
    found = jobs.jobs_by_id(jobs.task_jobs(task_id))
    if caller.is_operator or any(can_see(caller, job, jobs) for job in found):
        return
    raise ApiError(
        falcon.HTTP_403,
        "forbidden",
        "result_visibility: a run reads the tasks of its own job and its descendants;"
        f" task {task_id} is not one of them",
    )


def require_stream(req: falcon.Request, stream_id: str, jobs: JobLookup) -> None:
    """A job's stream is read like the job, a task's like the task (ADR 0065); a session's
    stream records no result and stays readable by every run of the session.

    Raises:
        ApiError: 403 as ``require_job`` and ``require_task`` say.
    """
    kind, _, key = stream_id.partition(":")
    record = jobs.job(key) if kind == "job" else None
    if record is not None:
        require_job(req, record, jobs)
    elif kind == "task":
        require_task(req, key, jobs)
