"""Controls into a run's live channel over ``/v1`` (ADR 0038): ``POST /v1/jobs/{id}/steer``,
``interrupt``, ``finalize``, ``respond`` and ``effort``, and ``GET /v1/jobs/{id}/controls``.

A control is a ``SendControl`` command like any other: the operator or an ancestor's live run
granted the action (``coordination``'s callers, the rules check the run and its grant again
inside the write, ADR 0057), ``If-Match`` required as the job's control revision
(``expected_revision``: 428 without it, 412 when stale), the lease held before the write. It
answers 202 once the control is recorded; its delivery into the run is recorded later
(``job.control_delivered``), and ``GET .../controls`` shows what became of it. Bodies are
strict: an unknown field or a value outside its limits is a 400 (a response over 64 KiB of
JSON too, as the rule words it), a body over its cap a 413, and nothing is recorded on any
refusal. A response is sent to the command as compact JSON text.
"""

from __future__ import annotations

import json
from typing import Any

import falcon
import msgspec

from adapters.http import auth, media
from adapters.http.errors import ApiError
from adapters.http.ports import ServerRuntime
from adapters.http.schemas import (
    ChannelOut,
    ControlOut,
    ControlSentOut,
    EffortIn,
    FinalizeIn,
    InterruptIn,
    RequestOut,
    RespondIn,
    SteerIn,
)
from adapters.http.v1 import Control, Reads, job_out
from engine.domain import channel as ch
from engine.domain.rows import JobRow
from projections import queries

# A body's cap, in bytes: room for a 64 KiB response (or 20,000 characters of text) written
# with JSON escapes; the limits that matter are checked on the decoded values.
BODY_LIMIT = 8 * ch.RESPONSE_LIMIT

BODIES: dict[str, type[msgspec.Struct]] = {
    "steer": SteerIn,
    "interrupt": InterruptIn,
    "finalize": FinalizeIn,
    "respond": RespondIn,
    "effort": EffortIn,
}
# What each action does, as ``/openapi.json`` says it (``adapters.http.routes``).
SUMMARIES = {
    "steer": "Steer the run's active turn (turn must be the job's turn, else 409 stale_turn)",
    "interrupt": "Stop the run's active turn (turn must be the job's turn)",
    "finalize": "Ask the run to finish now from what it has (text optional)",
    "respond": "Answer the run's pending request (a JSON object, at most 64 KiB as JSON)",
    "effort": "Set the run's reasoning effort",
}


def response_text(response: dict[str, Any]) -> str:
    """``response`` as the command carries it: compact JSON text (the rule refuses more than
    ``RESPONSE_LIMIT`` characters of it, a 400 like any value outside its limits)."""
    return json.dumps(response, ensure_ascii=False, separators=(",", ":"))


def command_of(
    job_id: str, action: str, body: Any, caller: auth.Caller, expected_revision: int | None
) -> ch.SendControl:
    """The ``SendControl`` a decoded body asks for, by ``caller``, at ``expected_revision``."""
    return ch.SendControl(
        job_id=job_id,
        action=action,  # type: ignore[arg-type]
        text=getattr(body, "text", ""),
        turn=getattr(body, "turn", ""),
        request=getattr(body, "request", ""),
        response=response_text(body.response) if action == "respond" else "",
        effort=getattr(body, "effort", ""),
        caller_job=caller.job_id,
        caller_token_digest=caller.token_digest,
        expected_revision=expected_revision,
    )


class ControlAction(Control):
    """``POST /v1/jobs/{id}/<action>``: one resource per action, each with its body."""

    def __init__(self, runtime: ServerRuntime, action: str) -> None:
        super().__init__(runtime)
        self.action, self.schema = action, BODIES[action]

    def on_post(self, req: falcon.Request, resp: falcon.Response, job_id: str) -> None:
        caller = auth.caller_of(req)
        record = self._job(req, job_id)
        # finalize's body is optional (its text too); every other action needs one.
        body = self.body(req, self.schema, self.action != "finalize", BODY_LIMIT)
        expected = self.expected_revision(req, required=True)
        self.run_lease()
        command = command_of(record.job_id, self.action, body, caller, expected)
        result = self.runtime.handle(command)
        now = self.runtime.reads.job(job_id) or record
        resp.status = falcon.HTTP_202
        media.json_response(resp, ControlSentOut(control=result.first_position, job=job_out(now)))

    def _job(self, req: falcon.Request, job_id: str) -> JobRow:
        record = self.runtime.reads.job(job_id)
        if record is None:
            raise ApiError(falcon.HTTP_404, "not_found", f"job {job_id!r} does not exist")
        auth.require_session(req, record.session_id, f"job {job_id}")
        return record


def control_out(row: queries.ControlRow) -> ControlOut:
    fields = msgspec.structs.asdict(row)
    return ControlOut(**{**fields, "body": json.loads(row.body)})


class Controls(Reads):
    """``GET /v1/jobs/{id}/controls``: its latest 100 controls, newest first, and its runs'
    questions, oldest first; read like the job itself."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, job_id: str) -> None:
        record = self.found(self.reads.job(job_id), "job", job_id)
        auth.require_job(req, record, self.reads)
        media.json_response(
            resp,
            ChannelOut(
                controls=[control_out(r) for r in self.reads.controls(job_id)],
                requests=[
                    RequestOut(**msgspec.structs.asdict(r)) for r in self.reads.requests(job_id)
                ],
            ),
        )
