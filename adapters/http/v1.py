"""The ``/v1`` read and control API (design.md §5.3), served from the read models.

Every route needs a bearer token (``adapters.http.auth``). Reads take no lease; a run token
reads only its own session, checked here where the entity's session is known. Controls are
one command each, take the lease and answer the new row. A session's are the operator's and
map ``If-Match`` to ``expected_version``; a job's are the operator's or a live run's of an
ancestor granted the control (the rules check which, ADR 0057) and map ``If-Match`` to the
job's control revision (``expected_revision``). Errors use one table
(``adapters.http.errors``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import falcon
import msgspec

from adapters.http import auth, media, paging, ports, sse
from adapters.http.errors import ApiError
from adapters.http.follow import follow
from adapters.http.ports import ReadRuntime, ServerRuntime
from adapters.http.schemas import (
    ControlIn,
    EventOut,
    EventPage,
    JobOut,
    JobPage,
    LeaseOut,
    LeasePage,
    SessionOut,
    SessionPage,
    TaintIn,
    TaskOut,
)
from adapters.services.job_controls import Controller
from adapters.system.processes import is_alive
from engine import Machines
from engine.domain import MACHINES, push
from engine.domain import commands as c
from engine.domain import controls as ctl
from engine.domain.rows import JobRow, LeaseRow, SessionRow, TaskRow, out
from engine.engine import CommandResult
from engine.events import RecordedEvent

_json = media.json_response


def session_out(record: SessionRow) -> msgspec.Struct:
    return out(SessionOut, record)  # type: ignore[no-any-return]


def job_out(record: JobRow) -> msgspec.Struct:
    return out(JobOut, record)  # type: ignore[no-any-return]


def task_out(record: TaskRow) -> msgspec.Struct:
    return out(TaskOut, record)  # type: ignore[no-any-return]


def lease_out(record: LeaseRow) -> msgspec.Struct:
    return out(LeaseOut, record)  # type: ignore[no-any-return]


def event_out(recorded: RecordedEvent) -> EventOut:
    fields = msgspec.structs.asdict(recorded)
    return EventOut(**{**fields, "event": msgspec.to_builtins(recorded.event)})


T = TypeVar("T")
CommandT = TypeVar("CommandT", bound=c.Command)


class Reads:
    def __init__(self, runtime: ReadRuntime) -> None:
        self.runtime = runtime

    @property
    def reads(self) -> ports.Reads:
        return self.runtime.reads

    @staticmethod
    def found(record: T | None, what: str, key: str) -> T:
        if record is None:
            raise ApiError(falcon.HTTP_404, "not_found", f"{what} {key!r} does not exist")
        return record

    def found_or_retired(self, record: T | None, kind: str, key: str, told: bool) -> T:
        """``found``, but an entity a retention policy retired (ADR 0062) is 410 Gone with
        when and why, not "never existed", for a caller ``told`` may know of it.

        Raises:
            ApiError: 410 retired, or 404.
        """
        gone = self.reads.retired(kind, key) if record is None and told else None
        if gone is not None:
            raise ApiError(
                falcon.HTTP_410,
                "retired",
                f"{kind} {key!r} was retired at {gone.retired_at}: {gone.policy}",
                retired_at=gone.retired_at,
                ended_at=gone.ended_at,
                policy=gone.policy,
                position=gone.position,
            )
        return self.found(record, kind, key)


class SessionsCollection(Reads):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state, after, limit = req.get_param("state"), paging.after_id(req), paging.limit(req)
        caller = auth.caller_of(req)
        if caller.is_operator:
            page = self.reads.sessions_page(state, after, limit)
            rows, following = page.rows, page.next
        else:  # a run lists its own session, on one page (ids order the pages)
            own = self.reads.session(caller.session_id or "")
            fits = own is not None and state in (None, own.state)
            rows = [own] if own is not None and fits and (after or "") < own.session_id else []
            following = None
        _json(resp, SessionPage(sessions=[session_out(r) for r in rows], next=following))


class SessionItem(Reads):
    def on_get(self, req: falcon.Request, resp: falcon.Response, session_id: str) -> None:
        auth.require_session(req, session_id, f"session {session_id}")
        # Whoever may read the session may hear that it was retired.
        record = self.found_or_retired(self.reads.session(session_id), "session", session_id, True)
        _json(resp, session_out(record))


class JobsCollection(Reads):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = req.get_param("session")
        caller = auth.caller_of(req)
        if not caller.is_operator:  # a run lists its own session's jobs only
            session = session or caller.session_id
            auth.require_session(req, session or "", f"session {session}")
        page = self.reads.jobs_page(
            session,
            req.get_param("state"),
            paging.after_id(req),
            paging.limit(req),
            parent_job=req.get_param("parent"),
        )
        # A run sees only what it may read (ADR 0065): the page keeps its cursor, so a page
        # may hold fewer rows than the limit and the next one goes on after them.
        rows = [r for r in page.rows if auth.can_see(caller, r, self.reads)]
        _json(resp, JobPage(jobs=[job_out(r) for r in rows], next=page.next))


class JobItem(Reads):
    def on_get(self, req: falcon.Request, resp: falcon.Response, job_id: str) -> None:
        # Its session is gone with its row, so only the operator is told it was retired; a
        # run token is answered as before (404).
        operator = auth.caller_of(req).is_operator
        record = self.found_or_retired(self.reads.job(job_id), "job", job_id, operator)
        auth.require_job(req, record, self.reads)
        _json(resp, job_out(record))


class TaskItem(Reads):
    def on_get(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        operator = auth.caller_of(req).is_operator  # as for a job
        record = self.found_or_retired(self.reads.task(task_id), "task", task_id, operator)
        auth.require_session(req, record.session_id, f"task {task_id}")
        auth.require_task(req, task_id, self.reads)
        _json(resp, task_out(record))


class Leases(Reads):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        _json(resp, LeasePage(leases=[lease_out(r) for r in self.reads.leases()]))


class StreamEvents(Reads):
    def on_get(self, req: falcon.Request, resp: falcon.Response, stream_id: str) -> None:
        after = req.get_param("after")
        after = "0" if after is None else after  # an empty ``after=`` is refused
        if not after.isdigit():
            raise ApiError(falcon.HTTP_400, "invalid_argument", "after must be a version")
        operator = auth.caller_of(req).is_operator
        if not operator:
            auth.require_session(req, self._session_of(stream_id), f"stream {stream_id}")
            auth.require_stream(req, stream_id, self.reads)
        events = self.runtime.events.read_stream(stream_id, int(after))
        if not operator:  # a task's push secrets are its caller's (ADR 0039)
            events = [
                msgspec.structs.replace(e, event=push.without_secrets(e.event)) for e in events
            ]
        if not events and self.runtime.events.stream_head(stream_id).version == 0:
            raise ApiError(falcon.HTTP_404, "not_found", f"stream {stream_id!r} does not exist")
        last = events[-1].position if events else 0
        _json(resp, EventPage(events=[event_out(e) for e in events], next=last))

    def _session_of(self, stream_id: str) -> str:
        """The session a job, session or task stream belongs to; "" for any other stream (or
        an unknown entity), which no run's session matches."""
        kind, _, key = stream_id.partition(":")
        if kind == "session":
            return key
        record: JobRow | TaskRow | None = None
        if kind == "job":
            record = self.reads.job(key)
        elif kind == "task":
            record = self.reads.task(key)
        return record.session_id if record is not None else ""


class Events(Reads):
    """The global log: a JSON page, or followed live as SSE (ids are positions)."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        after = paging.after_position(req)
        if "text/event-stream" in (req.get_header("Accept") or ""):
            resp.content_type = "text/event-stream"
            resp.set_header("Cache-Control", "no-cache")
            resp.stream = self._follow(after)
            return
        events = self.runtime.events.read_all(after, paging.limit(req, 1000, 10_000))
        _json(
            resp,
            EventPage(
                events=[event_out(e) for e in events], next=events[-1].position if events else after
            ),
        )

    def _follow(self, after: int) -> Iterator[bytes]:
        runtime = self.runtime
        yield sse.comment("following")
        with runtime.open_stream():
            for recorded in follow(
                runtime.events,
                after,
                runtime.ending,
                keepalive_s=runtime.config.sse_keepalive_s,
            ):
                if recorded is None:
                    yield sse.comment("keepalive")
                else:
                    yield sse.event(recorded.event_type, event_out(recorded), recorded.position)
            yield sse.SHUTDOWN


class MachinesResource:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        machines = Machines(MACHINES).by_kind.values()
        if req.get_param("format") == "mermaid":
            resp.content_type = "text/plain; charset=utf-8"
            resp.text = "\n".join(f"%% {m.kind}\n{m.to_mermaid()}" for m in machines)
            return
        _json(resp, [m.to_json() for m in machines])


class MachineResource:
    """``GET /v1/machines/{kind}``: one machine's declaration as ``/v1/machines`` lists it
    (``?format=mermaid``, its diagram); a kind no machine has is a 404."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, kind: str) -> None:
        machine = Machines(MACHINES).by_kind.get(kind)
        if machine is None:
            raise ApiError(falcon.HTTP_404, "not_found", f"machine {kind!r} does not exist")
        if req.get_param("format") == "mermaid":
            resp.content_type = "text/plain; charset=utf-8"
            resp.text = f"%% {machine.kind}\n{machine.to_mermaid()}"
            return
        _json(resp, machine.to_json())


# -- controls ---------------------------------------------------------------------------------

SESSION_ACTIONS: dict[str, Callable[[str, str], c.Command]] = {
    "pause": lambda sid, reason: c.PauseSession(session_id=sid),
    "continue": lambda sid, reason: c.AttachSession(session_id=sid),
    "detach": lambda sid, reason: c.DetachSession(session_id=sid, by="operator"),
    "stop": lambda sid, reason: c.StopSession(session_id=sid, reason=reason),
    "cancel": lambda sid, reason: c.CancelSession(session_id=sid, reason=reason),
}
# A caller's controls of a job (ADR 0057); ``fork`` answers the new job's row (and is served by
# ``coordination.JobControls``).
JOB_ACTIONS = (*ctl.ACTIONS, "fork")


class Control:
    def __init__(self, runtime: ServerRuntime) -> None:
        self.runtime = runtime

    @staticmethod
    def expected_version(req: falcon.Request) -> int | None:
        raw = req.get_header("If-Match")
        if raw is None:
            return None
        value = raw.removeprefix("W/").strip('"')
        if not value.isdigit():
            raise ApiError(falcon.HTTP_400, "invalid_argument", "If-Match must be a version")
        return int(value)

    @staticmethod
    def body(req: falcon.Request, schema: type[Any], required: bool, limit: int = 65536) -> Any:
        raw = req.stream.read(limit + 1)
        if len(raw) > limit:
            raise ApiError(
                falcon.HTTP_413, "payload_too_large", f"body exceeds {limit // 1024} KiB"
            )
        if not raw.strip():
            if required:
                raise ApiError(falcon.HTTP_400, "invalid_argument", "a JSON body is required")
            return schema()
        if not (req.content_type or "").startswith("application/json"):
            raise ApiError(
                falcon.HTTP_415, "unsupported_media_type", "send the body as application/json"
            )
        try:
            return media.decode(raw, schema)
        except msgspec.ValidationError as ex:
            raise ApiError(falcon.HTTP_400, "invalid_argument", str(ex)) from None
        except msgspec.DecodeError:
            raise ApiError(falcon.HTTP_400, "invalid_argument", "body is not JSON") from None
        except RecursionError:  # JSON nested deeper than the decoder goes
            raise ApiError(falcon.HTTP_400, "invalid_argument", "body nests too deep") from None

    @classmethod
    def expected_revision(cls, req: falcon.Request, required: bool = False) -> int | None:
        """A job control's ``If-Match``: the job's control revision the caller saw (ADR
        0057), which the channel controls must name.

        Raises:
            ApiError: 428 when ``required`` and it is missing; 400 when it is no number.
        """
        expected = cls.expected_version(req)
        if expected is None and required:
            raise ApiError(
                falcon.HTTP_428,
                "precondition_required",
                "If-Match with the job's control_revision is required for this control",
            )
        return expected

    def run_lease(self) -> None:
        """Hold the workspace lease before a write (``LeaseBusy``, a 503 from ``V1_ERRORS``,
        while another instance holds it)."""
        self.runtime.ensure_lease()

    def versioned(self, req: falcon.Request, command: CommandT) -> CommandT:
        """``command`` expecting the version ``If-Match`` names, if it names one."""
        expected = self.expected_version(req)
        if expected is None:
            return command
        return msgspec.structs.replace(command, expected_version=expected)

    def run(self, req: falcon.Request, command: c.Command) -> CommandResult:
        command = self.versioned(req, command)
        self.run_lease()
        return self.runtime.handle(command)


class SessionControl(Control):
    def on_post(
        self, req: falcon.Request, resp: falcon.Response, session_id: str, action: str
    ) -> None:
        make = SESSION_ACTIONS.get(action)
        if make is None:
            raise ApiError(falcon.HTTP_404, "not_found", f"no session action {action!r}")
        body = self.body(req, ControlIn, False)
        if self.runtime.reads.session(session_id) is None:  # a missing target before its body
            raise ApiError(falcon.HTTP_404, "not_found", f"session {session_id!r} does not exist")
        only_for(body, action, grace=("stop",), mode=())
        if action == "continue":
            self._check_controller(session_id)
        command = self.versioned(req, make(session_id, body.reason))
        self.run_lease()
        # A stop without If-Match is the graceful one, with the call's grace; what follows a
        # control is the wind-down's (adapters.services.winddown).
        self.runtime.winddown.control_session(command, body.grace)
        SessionItem(self.runtime).on_get(req, resp, session_id)

    def _check_controller(self, session_id: str) -> None:
        """design.md §4.3: ``session.attached`` only while the recorded controller (pid + start
        token) is alive. A session without a controller of its own has nothing to check."""
        controller = self.runtime.reads.session_controller(session_id)
        if controller is None or not controller.has_controller:
            return
        pid, token = controller.pid, controller.start_token
        if not is_alive(pid or 0, token or ""):
            raise ApiError(
                falcon.HTTP_409,
                "controller_gone",
                f"session {session_id}'s controller (pid {pid}) is not running, so it cannot "
                "be attached; resume the session to start a new controller",
            )


class SessionTaint(Control):
    """Taint is permanent, so it needs a reason: its own path with a required body."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, session_id: str) -> None:
        body = self.body(req, TaintIn, True)
        self.run(req, c.TaintSession(session_id=session_id, reason=body.reason))
        SessionItem(self.runtime).on_get(req, resp, session_id)


def only_for(body: ControlIn, action: str, **fields: tuple[str, ...]) -> None:
    """Refuse a body field the action does not take (400), e.g. a pause's ``mode`` on a stop."""
    for name, actions in fields.items():
        if getattr(body, name) is not None and action not in actions:
            raise ApiError(falcon.HTTP_400, "invalid_argument", f"{action} takes no {name}")


class JobControl(Control):
    """``POST /v1/jobs/{id}/pause|continue|cancel``: the operator's, or a live run's of an
    ancestor in the job's session granted the control (ADR 0057), checked in the write
    (``engine.domain.rules.job.controller``); ``If-Match`` names the control revision. A pause
    takes ``mode`` (``live`` or ``cold``) and a cold pause's ``grace`` (ADR 0058); a continue
    of a job whose run is gone relaunches it."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, job_id: str, action: str) -> None:
        if action not in ctl.ACTIONS:
            raise ApiError(falcon.HTTP_404, "not_found", f"no job action {action!r}")
        caller = auth.caller_of(req)
        record = self.runtime.reads.job(job_id)
        if record is None:  # a missing target before its body
            raise ApiError(falcon.HTTP_404, "not_found", f"job {job_id!r} does not exist")
        auth.require_session(req, record.session_id, f"job {job_id}")  # the rules check again
        body = self.body(req, ControlIn, False)
        only_for(body, action, grace=("pause",), mode=("pause",))
        by = Controller(caller.job_id, caller.token_digest, self.expected_revision(req))
        self.run_lease()
        if action == "continue" and self.runtime.winddown.is_relaunchable(job_id):
            # Suspended, or cold-paused with its run gone: a new run with its earlier output
            # (adapters.services.winddown); a refusal at re-admission is recorded, then 429.
            # DispatchFailed: a 500 from V1_ERRORS
            self.runtime.winddown.relaunch(job_id, body.input, by)
        else:
            self.runtime.handle(
                ctl.ControlJob(
                    job_id=job_id,
                    action=action,  # type: ignore[arg-type]
                    reason=body.reason,
                    mode=body.mode or "live",
                    grace_s=30 if body.grace is None else math.ceil(body.grace),
                    caller_job=by.caller_job,
                    caller_token_digest=by.token_digest,
                    expected_revision=by.expected_revision,
                )
            )
        JobItem(self.runtime).on_get(req, resp, job_id)
