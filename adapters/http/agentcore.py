"""The AgentCore runtime contract (SPEC §5.1): ``GET /ping`` and ``POST /invocations``."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any, TypeVar

import falcon
import msgspec
from msgspec import UNSET, UnsetType

from adapters.config import LEASE_BUSY_TEXT
from adapters.http import media, sse
from adapters.http.follow import follow
from adapters.http.inbound import INVOCATION_TEXTS, InvocationIn, refusal
from adapters.runtime import DispatchFailed, Runtime, workspace_file
from engine.domain import ids
from engine.domain.errors import AdmissionRejected, AlreadyExists, Conflict, LeaseBusy
from engine.domain.job import TERMINAL as JOB_TERMINAL
from engine.domain.job import JobOutput
from engine.errors import EngineError, InvalidTransition

T = TypeVar("T")

SESSION_ID = re.compile(r"^[A-Za-z0-9_:-]{1,200}$")


class HttpError(Exception):
    """An answer other than 200: ``{"error": message}`` with ``status``."""

    def __init__(self, status: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


def read_invocation(req: falcon.Request, limit: int) -> InvocationIn:
    """The body, at most ``limit`` bytes of JSON whatever the content type (curl sends form
    encoding by default), as an ``InvocationIn``. Chunked uploads are bounded by reading
    ``limit + 1``."""
    if req.content_length is not None and req.content_length > limit:
        raise HttpError(falcon.HTTP_413, f"body exceeds {limit} bytes")
    raw = req.stream.read(limit + 1)
    if len(raw) > limit:
        raise HttpError(falcon.HTTP_413, f"body exceeds {limit} bytes")
    try:
        return media.decode(raw, InvocationIn)
    except msgspec.ValidationError as ex:
        raise HttpError(falcon.HTTP_400, refusal(ex, INVOCATION_TEXTS)) from None
    except msgspec.DecodeError:
        raise HttpError(falcon.HTTP_400, "body must be a JSON object") from None


def _given(value: T | UnsetType) -> T | None:
    return None if value is UNSET else value


def _wants_sse(req: falcon.Request) -> bool:
    return "text/event-stream" in (req.get_header("Accept") or "")


class Ping:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.runtime.ping()


class Invocations:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.config = runtime.config

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_invocation(req, self.config.max_body)
        if body.get is not UNSET:
            self._get(req, resp, body)
            return
        prompt, prompt_file = _given(body.prompt), _given(body.prompt_file)
        if (prompt is None) == (prompt_file is None):
            raise HttpError(falcon.HTTP_400, "exactly one of prompt or promptFile is required")
        if prompt_file is not None:
            try:
                prompt_file = workspace_file(
                    self.config.workspace, prompt_file, self.config.max_body
                )
            except ValueError as ex:
                raise HttpError(falcon.HTTP_400, str(ex)) from None
        session = body.session
        if session is not None and not SESSION_ID.match(session):
            raise HttpError(falcon.HTTP_400, "session must match ^[A-Za-z0-9_:-]{1,200}$")
        agent = body.agent or ""
        caller_id = body.id
        is_async = body.is_async

        runtime = self.runtime
        if caller_id is not None and (known := runtime.find_job(caller_id)) is not None:
            self._duplicate(resp, known)
            return
        try:
            runtime.ensure_lease()
            accepted = runtime.dispatch(prompt or "", prompt_file or "", session, agent, caller_id)
        except LeaseBusy:
            raise HttpError(falcon.HTTP_503, LEASE_BUSY_TEXT) from None
        except DispatchFailed as ex:
            raise HttpError(falcon.HTTP_500, str(ex)) from None
        except (Conflict, InvalidTransition, AlreadyExists) as ex:
            raise HttpError(falcon.HTTP_409, ex.message, code=ex.code) from None
        except AdmissionRejected as ex:
            raise HttpError(falcon.HTTP_429, ex.message, **ex.fields) from None
        if accepted.duplicate:
            self._duplicate(resp, accepted.job_id)
            return
        receipt = {
            "status": "accepted",
            "invocation": accepted.job_id,
            "session": accepted.session_id,
            "id": caller_id,
        }
        if is_async:
            resp.media = receipt
        elif _wants_sse(req):
            self._stream(resp, accepted.job_id, receipt, accepted.position, after=0)
        else:
            resp.media = runtime.wait_until_done(accepted.job_id, self.config.sync_wait_s)

    def _duplicate(self, resp: falcon.Response, job_id: str) -> None:
        resp.media = {**self.runtime.job_body(job_id), "duplicate": True}

    def _get(self, req: falcon.Request, resp: falcon.Response, body: InvocationIn) -> None:
        key = str(body.get)
        if body.prompt is not UNSET or body.prompt_file is not UNSET:
            raise HttpError(falcon.HTTP_400, "get reads a job; it takes no prompt")
        # A get is a write request for the lease (SPEC §4.2: it starts recovery after a crash)
        # but only a read for its answer: a busy lease does not stop it.
        with contextlib.suppress(LeaseBusy):
            self.runtime.ensure_lease()
        job_id = self.runtime.find_job(key)
        if job_id is None:
            raise HttpError(falcon.HTTP_404, f"no job {key!r}")
        if not _wants_sse(req):
            resp.media = self.runtime.job_body(job_id)
            return
        last = req.get_header("Last-Event-ID") or "0"
        if not last.isdigit() or int(last) >= 1 << 63:
            raise HttpError(falcon.HTTP_400, "Last-Event-ID must be a log position")
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
        ``sse_keepalive_s`` of silence for as long as the job runs."""
        runtime, log = self.runtime, self.runtime.engine.log
        yield sse.comment("stream open")  # sends the headers before the first wait
        if receipt is not None:
            yield sse.event("accepted", receipt, receipt_position)
        for recorded in follow(
            log,
            after,
            runtime.shutdown,
            keepalive_s=self.config.sse_keepalive_s,
            poll_s=0.5,
            stream_id=ids.job(job_id),
            wanted=lambda e: isinstance(e.event, JobOutput) or e.state in JOB_TERMINAL,
        ):
            if recorded is None:
                yield sse.comment("keepalive")
            elif recorded.state in JOB_TERMINAL:
                yield sse.event("result", runtime.job_body(job_id), recorded.position)
                return
            elif isinstance(recorded.event, JobOutput):
                yield sse.event("delta", {"text": recorded.event.text}, recorded.position)
        yield sse.SHUTDOWN  # follow ends without a deadline only when the server stops


def handle_http_error(
    req: falcon.Request, resp: falcon.Response, ex: HttpError, params: dict[str, Any]
) -> None:
    resp.status = ex.status
    resp.media = {"error": ex.message, **ex.extra}


def handle_engine_error(
    req: falcon.Request, resp: falcon.Response, ex: EngineError, params: dict[str, Any]
) -> None:
    resp.status = falcon.HTTP_409
    resp.media = {"error": ex.message, "code": ex.code}
