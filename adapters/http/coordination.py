"""Agents that coordinate workers over ``/v1`` (design.md §4.8, §5.5, §4.7): spawning from a
running job, listing and waiting on children, and the result's disposition.

Two kinds of caller (``adapters.http.auth``): the operator and a running job, by the
``FOLDLINE_RUN_TOKEN`` of its current run. Only the token's sha256 is on record; the rules
check it again inside the write transaction, so a token stops working the moment its run ends.
"""

from __future__ import annotations

import contextlib
import json
import math
import posixpath
import time

import falcon

from adapters.http import auth, media
from adapters.http.errors import ApiError
from adapters.http.ports import ServerRuntime
from adapters.http.schemas import (
    ControlIn,
    DispositionIn,
    IntegrateIn,
    JobsOut,
    ResultOut,
    SpawnIn,
    SpawnItemIn,
    WaitOut,
)
from adapters.http.v1 import (
    Control,
    JobControl,
    JobItem,
    JobsCollection,
    Reads,
    job_out,
    only_for,
)
from adapters.services.dispatch import Spawn
from adapters.services.integration import IntegrationFailed
from adapters.services.job_controls import Controller
from adapters.services.writers import PatchUnusable
from engine.domain import commands as c
from engine.domain.agents import DEFAULT_AGENT
from engine.domain.job import TERMINAL, JobOutput
from engine.domain.result import UNREAD
from engine.domain.rows import JobRow
from engine.errors import ConcurrencyError, InvalidTransition

RESULT_PAGE = 65536  # characters of result text per GET
MAX_WAIT_S = 300.0
DEFAULT_WAIT_S = 60.0  # a wait that names no timeout
# What the document says of ``timeout`` (seconds): what ``_timeout`` takes, and its default.
TIMEOUT = {"type": "number", "minimum": 0, "maximum": MAX_WAIT_S, "default": DEFAULT_WAIT_S}
MAX_WAIT_IDS = 100
SPAWN_BODY = 4 << 20


class CoordinationControl(Control):
    @staticmethod
    def caller(req: falcon.Request) -> auth.Caller:
        """The operator or the live run whose token is the bearer (``auth.Authentication``
        answered 401 for anything else before this runs)."""
        return auth.caller_of(req)


def _scope(path: str) -> str:
    """A write scope is a relative path inside the workspace, normalized."""
    clean = posixpath.normpath(path)
    if clean.startswith("/") or clean == ".." or clean.startswith("../") or "\0" in clean:
        raise ApiError(
            falcon.HTTP_400, "invalid_argument", f"write_scope {path!r} must stay in the workspace"
        )
    return clean


class Spawning(CoordinationControl):
    """``POST /v1/jobs``: one job or a batch of 1..12, admitted all-or-nothing."""

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        caller = self.caller(req)
        body: SpawnIn = self.body(req, SpawnIn, True, SPAWN_BODY)
        if (body.jobs is None) == (body.prompt is None):
            raise ApiError(
                falcon.HTTP_400, "invalid_argument", "give either prompt (one job) or jobs"
            )
        items = body.jobs or [
            SpawnItemIn(prompt=body.prompt or "", agent=body.agent, write_scope=body.write_scope)
        ]
        agents = ",".join(item.agent for item in items)
        # Where a refusal of this spawn is recorded (``adapters.http.refusals``).
        req.context.spawn = (body.session if caller.job_id is None else caller.session_id, agents)
        if caller.job_id is None:
            if body.session is None:
                raise ApiError(
                    falcon.HTTP_400, "invalid_argument", "the operator names the session"
                )
            session_id = body.session
        else:
            if body.session is not None and body.session != caller.session_id:
                raise ApiError(falcon.HTTP_403, "forbidden", "a run spawns only in its own session")
            session_id = caller.session_id or ""
        spawns = [
            Spawn(item.agent, item.prompt, tuple(_scope(p) for p in item.write_scope))
            for item in items
        ]
        self.run_lease()
        # DispatchFailed: a 500 from the one table (errors.V1_ERRORS)
        job_ids = self.runtime.jobs.spawn(session_id, spawns, caller.job_id, caller.token_digest)
        records = self.runtime.reads.jobs_by_id(job_ids)
        resp.status = falcon.HTTP_201
        media.json_response(resp, JobsOut(jobs=[job_out(r) for r in records]))


class Jobs(JobsCollection, Spawning):
    """``/v1/jobs``: GET lists (``?session=``, ``?state=``, ``?parent=``), POST spawns."""

    runtime: ServerRuntime


class Waiting(Control):
    """``GET /v1/jobs/wait?ids=a,b&timeout=60``: until all are terminal or one changed."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        job_ids = [i for i in (req.get_param("ids") or "").split(",") if i]
        if not 1 <= len(job_ids) <= MAX_WAIT_IDS:
            raise ApiError(falcon.HTTP_400, "invalid_argument", f"ids: 1 to {MAX_WAIT_IDS} job ids")
        timeout = _timeout(req.get_param("timeout"))
        events, reads = self.runtime.events, self.runtime.reads
        first = reads.jobs_by_id(job_ids)
        missing = sorted(set(job_ids) - {r.job_id for r in first})
        if missing:
            raise ApiError(falcon.HTTP_404, "not_found", f"job {missing[0]!r} does not exist")
        for record in first:
            auth.require_job(req, record, reads)
        seen = {r.job_id: (r.version, r.result_state) for r in first}
        deadline = time.monotonic() + timeout
        while True:
            head = events.head()
            now = reads.jobs_by_id(job_ids)
            changed = [r.job_id for r in now if (r.version, r.result_state) != seen[r.job_id]]
            done = all(r.state in TERMINAL for r in now)
            left = deadline - time.monotonic()
            if changed or done or left <= 0 or self.runtime.ending():
                self.runtime.check_log()
                out = WaitOut(
                    jobs=[job_out(r) for r in now],
                    changed=changed,
                    timed_out=not (changed or done),
                )
                media.json_response(resp, out)
                return
            events.wait_for(head, min(1.0, left))


def _timeout(raw: str | None) -> float:
    if raw is None:
        return DEFAULT_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_WAIT_S:
        raise ApiError(
            falcon.HTTP_400, "invalid_argument", f"timeout must be 0..{MAX_WAIT_S:g} seconds"
        )
    return value


class Result(CoordinationControl):
    """``GET /v1/jobs/{id}/result?cursor=0``: pages the text; the first read of a finished
    job's result is recorded. A job that has not ended answers its output so far, marked
    ``partial`` and recorded by nobody (ADR 0057): a run reads another job's only as an
    ancestor granted ``inspect``."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, job_id: str) -> None:
        caller = self.caller(req)
        reads = self.runtime.reads
        record = reads.job(job_id)
        if record is None:
            raise ApiError(falcon.HTTP_404, "not_found", f"job {job_id!r} does not exist")
        auth.require_job(req, record, reads)
        raw = req.get_param("cursor") or "0"
        if not raw.isdigit():
            raise ApiError(falcon.HTTP_400, "invalid_argument", "cursor must be an offset")
        partial = record.result_state is None
        if partial and record.state in TERMINAL:  # superseded or cancelled: nothing to show
            raise ApiError(
                falcon.HTTP_409, "conflict", f"job {job_id} is {record.state}: no result"
            )
        if partial:
            self._may_inspect(caller, record)
            text = "".join(
                e.event.text
                for e in self.runtime.events.read_stream(f"job:{job_id}")
                if isinstance(e.event, JobOutput)
            )
        else:
            if record.result_state == UNREAD:
                self.run_lease()
                command = c.ReadJobResult(
                    job_id=job_id,
                    caller_job=caller.job_id,
                    caller_token_digest=caller.token_digest,
                )
                # Another reader may be first: the first read is the one on record.
                with contextlib.suppress(InvalidTransition, ConcurrencyError):
                    self.runtime.handle(command)
                record = reads.job(job_id) or record
            text = record.result or ""
        cursor = int(raw)
        page = text[cursor : cursor + RESULT_PAGE]
        end = cursor + len(page)
        media.json_response(
            resp,
            ResultOut(
                text=page,
                next_cursor=end if end < len(text) else None,
                result_state=record.result_state,
                partial=partial,
                contract_valid=record.contract_valid,
                contract_errors=list(record.contract_errors),
                # Valid means it parsed when the run ended: the same text parses again.
                json=json.loads(text) if record.contract_valid and not partial else None,
            ),
        )

    def _may_inspect(self, caller: auth.Caller, record: JobRow) -> None:
        """A run reads a live job's output so far: its own, or a descendant's whose agent its
        own grants ``inspect`` (ADR 0057); the operator any.

        Raises:
            ApiError: 403 for a run that is not an ancestor, or lacks the grant.
        """
        if caller.job_id is None or caller.job_id == record.job_id:
            return
        reads, parent, chain = self.runtime.reads, record.parent_job, 0
        while parent is not None and parent != caller.job_id and chain < 64:
            row = reads.job(parent)
            parent, chain = (row.parent_job if row is not None else None), chain + 1
        ancestor = reads.job(caller.job_id) if parent == caller.job_id else None
        if ancestor is None:
            raise ApiError(
                falcon.HTTP_403,
                "forbidden",
                f"job {caller.job_id} is not an ancestor of {record.job_id}: a job's output"
                " so far is its ancestors' to inspect",
            )
        policy = self.runtime.config.agents.policies.get(ancestor.agent, DEFAULT_AGENT)
        if "inspect" not in policy.grants(record.agent):
            raise ApiError(
                falcon.HTTP_403,
                "not_granted",
                f"agent {ancestor.agent or 'default'!r} has no 'inspect' grant on agent"
                f" {record.agent or 'default'!r} (controls of its agents-file entry)",
            )


class Fork(CoordinationControl):
    """``POST /v1/jobs/{id}/fork``: a new job of the source's agent, seeded with its prompt
    and its output so far (a writer's with its worktree's current change), below the caller
    (ADR 0057); the operator's or an ancestor's live run granted ``fork``; ``If-Match`` names
    the source's control revision; ``input`` is appended to the prompt. Answers the new job's
    row (``forked_from`` names the source)."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, job_id: str) -> None:
        caller = self.caller(req)
        record = self.runtime.reads.job(job_id)
        if record is None:
            raise ApiError(falcon.HTTP_404, "not_found", f"job {job_id!r} does not exist")
        auth.require_session(req, record.session_id, f"job {job_id}")
        body: ControlIn = self.body(req, ControlIn, False)
        only_for(body, "fork", grace=("pause",), mode=("pause",))
        by = Controller(caller.job_id, caller.token_digest, self.expected_revision(req))
        self.run_lease()
        # DispatchFailed: a 500 from the one table (errors.V1_ERRORS)
        fork_id = self.runtime.jobs.fork(job_id, body.input, by)
        media.json_response(resp, job_out(self.runtime.reads.job(fork_id) or record))


class Disposition(CoordinationControl):
    """``POST /v1/jobs/{id}/result/accept|reject`` (``reason``) and ``.../integrate`` (or its
    old name ``integrated``; ``sha256`` optional, checked when given), which applies the kept
    patch to the workspace (``adapters.services.integration``): by an ancestor's live run or the
    operator; answers the job row."""

    def on_post(
        self, req: falcon.Request, resp: falcon.Response, job_id: str, disposition: str
    ) -> None:
        caller = self.caller(req)
        by, digest = caller.job_id, caller.token_digest
        record = self.runtime.reads.job(job_id)
        if record is not None:  # a run judges its own session's jobs only (the rules again)
            auth.require_session(req, record.session_id, f"job {job_id}")
        if disposition in ("accept", "reject"):
            reason = self.body(req, DispositionIn, True).reason
            make = c.AcceptJobResult if disposition == "accept" else c.RejectJobResult
            command = make(job_id=job_id, reason=reason, caller_job=by, caller_token_digest=digest)
            self.run(req, command)
        elif disposition in ("integrate", "integrated"):
            sha256 = self.body(req, IntegrateIn, False).sha256
            self.run_lease()
            try:
                self.runtime.integration.integrate(job_id, by, digest, sha256)
            except IntegrationFailed as ex:
                raise ApiError(ex.status, "integration_failed", str(ex)) from None
        else:
            raise ApiError(falcon.HTTP_404, "not_found", f"no result action {disposition!r}")
        JobItem(self.runtime).on_get(req, resp, job_id)


class Patch(Reads):
    """``GET /v1/jobs/{id}/patch``: a writer's change as kept, a binary-safe git diff."""

    runtime: ServerRuntime

    def __init__(self, runtime: ServerRuntime) -> None:
        super().__init__(runtime)

    def on_get(self, req: falcon.Request, resp: falcon.Response, job_id: str) -> None:
        record = self.found(self.reads.job(job_id), "job", job_id)
        auth.require_job(req, record, self.reads)
        if record.patch is None:
            raise ApiError(falcon.HTTP_404, "not_found", f"job {job_id} has no patch")
        try:
            data = self.runtime.jobs.worktrees.read_patch(job_id, record.patch.sha256)
        except PatchUnusable as ex:
            raise ApiError(falcon.HTTP_409, "conflict", str(ex)) from None
        resp.content_type = "text/x-diff; charset=utf-8"
        resp.set_header("ETag", f'"{record.patch.sha256}"')
        resp.data = data


class JobControls(JobControl):
    """``POST /v1/jobs/{id}/<action>``: ``fork``, else ``v1.JobControl``'s pause, continue
    and cancel."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, job_id: str, action: str) -> None:
        if action == "fork":
            Fork(self.runtime).on_post(req, resp, job_id)
            return
        super().on_post(req, resp, job_id, action)
