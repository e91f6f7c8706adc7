"""The AgentCore runtime contract (design.md §5.1): ``GET /ping`` and ``POST /invocations``.

``deliver`` (the default) sends the prompt into the session's running job when its run takes
input (ADR 0038, ``Invocations._deliver``) instead of starting a new job; otherwise the new job's
run gets the prompts of the job it supersedes too (ADR 0048). A session runs the agent it was
created with: a call naming another one is answered with a warning (``agent_warning``).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import falcon
import msgspec
from msgspec import UNSET, UnsetType

from adapters.http import media, sse
from adapters.http.a2a.wire import artifact_json, part_json
from adapters.http.errors import ApiError
from adapters.http.follow import follow
from adapters.http.inbound import INVOCATION_TEXTS, InvocationIn, refusal
from adapters.http.ports import ServerRuntime
from engine.domain import answer, ids
from engine.domain.errors import LeaseBusy
from engine.domain.job import TERMINAL as JOB_TERMINAL
from engine.domain.job import JobAnswered, JobArtifact, JobInputRequested, JobOutput, JobState

T = TypeVar("T")

# What an SSE stream of a job shows before its result: output, and its run's questions.
SHOWN = (JobOutput, JobInputRequested)

SESSION_ID = re.compile(r"^[A-Za-z0-9_:-]{1,200}$")


def find_job(runtime: ServerRuntime, key: str) -> str | None:
    """``get`` resolution: invocation (job) id first, then the caller's ``id`` (of a new job,
    else of a prompt delivered into a running one)."""
    reads = runtime.reads
    found = reads.find_invocation(key)
    return found or reads.job_of_control_command(ids.invocation_command(key))


def job_body(runtime: ServerRuntime, job_id: str) -> dict[str, Any]:
    """The AgentCore job body (design.md §5.1): ``status`` is ``running`` for any live state,
    ``settling`` too: its run ended and the jobs below it still work (ADR 0050). Such a body
    counts them in ``waitingOn`` and, as any running job's, has no ``result`` or ``files`` yet
    (the row keeps the run's; ``/v1/jobs`` shows them)."""
    job = runtime.reads.job_body(job_id)
    if job is None:
        gone = runtime.reads.retired("job", job_id)
        if gone is not None:  # its key is known forever; its row was retired (ADR 0062)
            raise ApiError(
                falcon.HTTP_410,
                "retired",
                f"job {job_id} was retired at {gone.retired_at}: {gone.policy}",
                invocation=job_id,
                retired_at=gone.retired_at,
                ended_at=gone.ended_at,
            )
        raise LookupError(f"no job {job_id}")  # callers pass ids of jobs they found or made
    settling = job.state == JobState.SETTLING
    body: dict[str, Any] = {
        "status": job.state if job.terminal else "running",
        "invocation": job.job_id,
        "session": job.session_id,
        "id": job.caller_id,
        "result": None if settling else job.result,
        "files": [] if settling else list(job.files),
        "startedAt": job.started_at,
        "finishedAt": job.finished_at,
        "state": job.state,
        # The agent named in vain first (ADR 0048), then an ok run's WARNING: lines
        # ("completed with warnings"), which a settling job has not given yet (ADR 0050).
        "warnings": [
            *_ignored(job.session_id, job.agent, job.agent_ignored),
            *([] if settling else job.warnings),
        ],
        "agent": job.agent,  # the agent that ran: the session's (ADR 0048)
        "covers": list(job.covers),  # the superseded jobs whose prompts it answers too
    }
    if job.superseded_by is not None:
        body["supersededBy"] = job.superseded_by
    if settling:
        body["waitingOn"] = runtime.reads.live_below(job_id)
    elif not job.terminal:
        body.update(questions_of(runtime, job_id))
    else:
        body.update(answers_of(runtime, job_id))
    return body


def answers_of(runtime: ServerRuntime, job_id: str) -> dict[str, Any]:
    """What an ended job's runs answered beyond their text (ADR 0054), in A2A 1.0 shapes:
    ``artifacts`` (each whole, its chunks folded), ``message`` (``{"parts": [...]}``, a direct
    answer) and ``rejected`` (the reason of a refusal); only those it has."""
    artifacts: tuple[answer.Artifact, ...] = ()
    out: dict[str, Any] = {}
    for recorded in runtime.events.read_stream(ids.job(job_id)):
        said = recorded.event
        if isinstance(said, JobArtifact):
            artifacts = answer.folded(
                artifacts,
                said.artifact_id,
                said.parts,
                append=said.append,
                name=said.name,
                description=said.description,
            )
        elif isinstance(said, JobAnswered) and said.kind == "message":
            out["message"] = {"parts": [part_json(p) for p in said.parts]}
        elif isinstance(said, JobAnswered) and said.kind == "reject":
            out["rejected"] = said.text
    if artifacts:
        out["artifacts"] = [artifact_json(a) for a in artifacts]
    return out


def questions_of(runtime: ServerRuntime, job_id: str) -> dict[str, Any]:
    """``waitingForInput`` and ``questions`` (oldest first, each its ``request`` id and
    ``question``) while the job's run has questions nobody answered yet; else nothing."""
    questions = [
        {"request": r.request, "question": r.question}
        for r in runtime.reads.requests(job_id)
        if r.state == "pending"
    ]
    return {"waitingForInput": True, "questions": questions} if questions else {}


def answered(runtime: ServerRuntime, job_id: str, control: int) -> dict[str, Any]:
    """``answered``: the request id of the question ``control`` answered, if it was an
    answer; else nothing."""
    for request in runtime.reads.requests(job_id):
        if request.answer == control:
            return {"answered": request.request}
    return {}


def agent_warning(session_id: str, agent: str, named: str) -> str:
    """What the answer says when the call named ``named`` on a session that runs ``agent``
    (ADR 0048): ``session s1 runs agent a; agent b ignored``."""
    ran = f"agent {agent}" if agent else "the default agent"
    return f"session {session_id} runs {ran}; agent {named} ignored"


def _ignored(session_id: str, agent: str, named: str | None) -> list[str]:
    return [agent_warning(session_id, agent, named)] if named and named != agent else []


def _with_warnings(body: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """``body`` with ``warnings`` first in its own, each once."""
    kept = [w for w in body.get("warnings", []) if w not in warnings]
    return {**body, "warnings": [*warnings, *kept]}


def wait_until_done(runtime: ServerRuntime, job_id: str, timeout_s: float) -> dict[str, Any]:
    """The job body once the job left running or its run waits for an answer (``questions``),
    or at the cap, still ``running``."""
    deadline = time.monotonic() + timeout_s
    events = runtime.events
    while True:
        head = events.head()
        body = job_body(runtime, job_id)
        remaining = deadline - time.monotonic()
        asks = "questions" in body  # the caller's answer is what the run waits for
        if body["status"] != "running" or asks or remaining <= 0 or runtime.ending():
            runtime.check_log()  # a job whose log is gone never ends: say so, not "running"
            return body
        events.wait_for(head, min(remaining, 1.0))


def workspace_file(workspace: Path, name: str, limit: int) -> str:
    """Validate a ``promptFile``: a regular, non-empty file of at most ``limit`` bytes inside the
    workspace (after resolving links), not under ``.foldline/``. Returns it relative.

    Raises:
        ValueError: with the reason, for a 400.
    """
    if not name or "\0" in name:
        raise ValueError("promptFile must be a non-empty workspace-relative path")
    root = workspace.resolve()
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError("promptFile must be relative to the workspace, without '..'")
    target = (root / name).resolve()
    if not target.is_relative_to(root):
        raise ValueError("promptFile resolves outside the workspace")
    if ".foldline" in target.relative_to(root).parts:
        raise ValueError("promptFile may not be under .foldline/")
    if not target.is_file():
        raise ValueError("promptFile is not a regular file")
    size = target.stat().st_size
    if size == 0 or size > limit:
        raise ValueError(f"promptFile must hold 1 to {limit} bytes, it has {size}")
    return str(target.relative_to(root))


def _bad(message: str) -> ApiError:
    """A 400: the request itself is malformed."""
    return ApiError(falcon.HTTP_400, "invalid_argument", message)


def read_invocation(req: falcon.Request, limit: int) -> InvocationIn:
    """The body, at most ``limit`` bytes of JSON whatever the content type (curl sends form
    encoding by default), as an ``InvocationIn``. Chunked uploads are bounded by reading
    ``limit + 1``."""
    if req.content_length is not None and req.content_length > limit:
        raise ApiError(falcon.HTTP_413, "payload_too_large", f"body exceeds {limit} bytes")
    raw = req.stream.read(limit + 1)
    if len(raw) > limit:
        raise ApiError(falcon.HTTP_413, "payload_too_large", f"body exceeds {limit} bytes")
    try:
        return media.decode(raw, InvocationIn)
    except msgspec.ValidationError as ex:
        raise _bad(refusal(ex, INVOCATION_TEXTS)) from None
    except msgspec.DecodeError:
        raise _bad("body must be a JSON object") from None


def _given(value: T | UnsetType) -> T | None:
    return None if value is UNSET else value


def _wants_sse(req: falcon.Request) -> bool:
    return "text/event-stream" in (req.get_header("Accept") or "")


class Ping:
    def __init__(self, runtime: ServerRuntime) -> None:
        self.runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.runtime.ping()


class Invocations:
    def __init__(self, runtime: ServerRuntime) -> None:
        self.runtime = runtime
        self.config = runtime.config

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_invocation(req, self.config.max_body)
        if body.get is not UNSET:
            self._get(req, resp, body)
            return
        prompt, prompt_file = _given(body.prompt), _given(body.prompt_file)
        if (prompt is None) == (prompt_file is None):
            raise _bad("exactly one of prompt or promptFile is required")
        if prompt_file is not None:
            try:
                prompt_file = workspace_file(
                    self.config.workspace, prompt_file, self.config.max_body
                )
            except ValueError as ex:
                raise _bad(str(ex)) from None
        session = body.session
        if session is not None and not SESSION_ID.match(session):
            raise _bad("session must match ^[A-Za-z0-9_:-]{1,200}$")
        agent = body.agent or ""
        caller_id = body.id
        is_async = body.is_async

        runtime = self.runtime
        if caller_id is not None and (known := runtime.jobs.repeat(caller_id)) is not None:
            self._duplicate(resp, known)
            return
        # A refusal (a busy workspace, admission, a conflict, ...) is answered from the one
        # table for this route, ``errors.INVOCATION_STATUS``.
        runtime.ensure_lease()
        accepted = runtime.invocations.invoke(
            prompt or "", prompt_file or "", session, agent, caller_id, deliver=body.deliver
        )
        if accepted.duplicate:
            self._duplicate(resp, accepted.job_id)
            return
        # A prompt delivered into the running job says so in every answer, with its control.
        delivery = {"delivered": True, "control": accepted.control} if accepted.control else {}
        if accepted.control:  # an answer to the run's question names the question
            delivery.update(answered(runtime, accepted.job_id, accepted.control))
        # The agent that runs it is the session's (ADR 0048): one named in vain is warned of.
        ran = job_body(runtime, accepted.job_id)
        warnings = _ignored(accepted.session_id, ran["agent"], agent)
        receipt = {
            "status": "accepted",
            "invocation": accepted.job_id,
            "session": accepted.session_id,
            "id": caller_id,
            **delivery,
            **({"warnings": warnings} if warnings else {}),
        }
        if is_async:
            resp.media = receipt
        elif _wants_sse(req):  # a delivery streams the job from its control on
            after = accepted.control
            self._stream(resp, accepted.job_id, receipt, accepted.position, after=after)
        else:
            done = wait_until_done(runtime, accepted.job_id, self.config.sync_wait_s)
            resp.media = _with_warnings({**done, **delivery}, warnings)

    def _duplicate(self, resp: falcon.Response, job_id: str) -> None:
        resp.media = {**job_body(self.runtime, job_id), "duplicate": True}

    def _get(self, req: falcon.Request, resp: falcon.Response, body: InvocationIn) -> None:
        key = str(body.get)
        if body.prompt is not UNSET or body.prompt_file is not UNSET:
            raise _bad("get reads a job; it takes no prompt")
        # A get is a write request for the lease (design.md §4.2: it starts recovery after a crash)
        # but only a read for its answer: a busy lease does not stop it.
        with contextlib.suppress(LeaseBusy):
            self.runtime.ensure_lease()
        job_id = find_job(self.runtime, key)
        if job_id is None:
            raise ApiError(falcon.HTTP_404, "not_found", f"no job {key!r}")
        if not _wants_sse(req):
            resp.media = job_body(self.runtime, job_id)
            return
        last = req.get_header("Last-Event-ID") or "0"
        if not last.isdigit() or int(last) >= 1 << 63:
            raise _bad("Last-Event-ID must be a log position")
        self._stream(resp, job_id, None, 0, after=int(last))

    def _stream(
        self,
        resp: falcon.Response,
        job_id: str,
        receipt: dict[str, Any] | None,
        receipt_position: int,
        after: int,
    ) -> None:
        resp.content_type = "text/event-stream"
        resp.set_header("Cache-Control", "no-cache")
        resp.stream = self._events(job_id, receipt, receipt_position, after)

    def _events(
        self, job_id: str, receipt: dict[str, Any] | None, receipt_position: int, after: int
    ) -> Iterator[bytes]:
        """accepted, then a delta per output chunk, then the result; ids are log positions so
        a client can resume with Last-Event-ID. Ends at the result, which is therefore always
        final, or at shutdown (the client reconnects). There is no cap, as in the source
        system (the sync cap is for plain JSON only): a keep-alive comment goes out every
        ``sse_keepalive_s`` of silence for as long as the job runs. Each question its run asks
        is an ``input_required`` event, and the stream stays open for the answer (the next
        prompt on the session)."""
        runtime, events = self.runtime, self.runtime.events
        yield sse.comment("stream open")  # sends the headers before the first wait
        if receipt is not None:
            yield sse.event("accepted", receipt, receipt_position)
        for recorded in follow(
            events,
            after,
            runtime.ending,
            keepalive_s=self.config.sse_keepalive_s,
            poll_s=0.5,
            stream_id=ids.job(job_id),
            wanted=lambda e: isinstance(e.event, SHOWN) or e.state in JOB_TERMINAL,
        ):
            if recorded is None:
                yield sse.comment("keepalive")
            elif recorded.state in JOB_TERMINAL:
                yield sse.event("result", job_body(runtime, job_id), recorded.position)
                return
            elif isinstance(recorded.event, JobInputRequested):  # the stream stays open
                asked = recorded.event
                question = {
                    "invocation": job_id,
                    "request": asked.request,
                    "question": asked.question,
                }
                yield sse.event("input_required", question, recorded.position)
            elif isinstance(recorded.event, JobOutput):
                yield sse.event("delta", {"text": recorded.event.text}, recorded.position)
        yield sse.SHUTDOWN  # follow ends without a deadline only when the server stops
