"""A job's trace (ADR 0059): the context each run records with its start, the run's span, and
the spans sent afterwards for a job and for a run a crash cut off.

- A new job's span gets its ids at the launch: the trace of the request that made it (or a
  new one), a fresh span id, and the request's span as its parent. The job's first run
  records them with its start (``job.started``'s ``trace``), beside its own span's
  ``traceparent``; the run's environment carries its span as ``TRACEPARENT`` (with
  ``TRACESTATE`` and ``BAGGAGE``), so an agent that exports spans joins the trace.
- A resumed run (after ``kill -9``, on this server or another) reads the context its job's
  last run recorded: it is a child of the same job span and links to the cut-off run's span,
  which is sent now, by this process, with its recorded ids (its own process died with it).
- The job's span, from its acceptance to its finish, is sent by the process whose run
  records the finish (``end_run``). A job that ends without a run's finish (cancelled while
  suspended, say) sends none.

Off (``tracing.enabled()`` false), every function returns at once and reads nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from adapters.system import tracing
from engine.clock import parse_time
from engine.domain import ids
from engine.domain.job import TraceArg, TraceContext
from engine.events import RecordedEvent
from engine.log import Log as EventLog
from projections import queries

log = logging.getLogger("foldline.tracing")
# The attributes every span of a job carries, by what they name.
SESSION, JOB, TASK, AGENT, RUN = (
    "foldline.session",
    "foldline.job",
    "foldline.task",
    "foldline.agent",
    "foldline.run",
)
OUTCOME, POSITIONS = "foldline.outcome", "foldline.positions"


@dataclass
class RunTrace:
    """A run's span, what its start records (``context``) and what its environment gets."""

    span: tracing.Span = tracing.NOOP
    context: TraceArg | None = None
    env: dict[str, str] = field(default_factory=dict)
    cut_off: dict[str, Any] | None = None  # the earlier run's span, sent once this one starts

    def started(self) -> None:
        """The run's start is recorded: the cut-off run it follows is sent now (once)."""
        if self.cut_off is not None:
            tracing.emit("run", **self.cut_off)
            self.cut_off = None

    def abandoned(self) -> None:
        self.span.fail("the run never started")
        self.span.end()


OFF = RunTrace()


def _ns(recorded_at: str) -> int:
    return int(parse_time(recorded_at).timestamp() * 1_000_000_000)


def _started_with_trace(events: list[RecordedEvent]) -> RecordedEvent | None:
    for recorded in reversed(events):
        if recorded.event_type == "job.started" and getattr(recorded.event, "trace", None):
            return recorded
    return None


def begin_run(
    log_: EventLog,
    job_id: str,
    run_id: str,
    session_id: str,
    agent: str,
    resumed: bool,
    isolation: str,
) -> RunTrace:
    """The span of a run about to be spawned, a child of its job's span: a new job's ids are
    made here, under this thread's current span (the request's); a resumed job's are read
    from its last run's start, and that run's span becomes a link (``RunTrace.cut_off``)."""
    if not tracing.enabled():
        return OFF
    links: list[str] = []
    cut_off = None
    recorded = _started_with_trace(log_.read_stream(ids.job(job_id))) if resumed else None
    if recorded is not None:
        before: TraceContext = recorded.event.trace  # type: ignore[attr-defined]
        job_tp, parent, state, baggage = before.job, before.parent, before.state, before.baggage
        links.append(before.run)
        cut_off = _cut_off_span(log_, job_id, recorded, before)
    else:
        here = tracing.current()
        parts = tracing.parts_of(here.get("traceparent", ""))
        trace_id, parent = (parts[0], parts[1]) if parts else (tracing.new_trace_id(), "")
        sampled = parts[2] if parts else True
        job_tp = tracing.traceparent(trace_id, tracing.new_span_id(), sampled)
        state, baggage = here.get("tracestate", ""), here.get("baggage", "")
    span = tracing.start(
        "run",
        carrier={"traceparent": job_tp, "tracestate": state, "baggage": baggage},
        links=links,
        attributes={
            SESSION: session_id,
            JOB: job_id,
            RUN: run_id,
            AGENT: agent,
            "foldline.resumed": resumed,
            "foldline.isolation": isolation,
        },
        root=True,
    )
    carrier = span.carrier()
    if "traceparent" not in carrier:
        return OFF
    context = TraceArg(
        run=carrier["traceparent"], job=job_tp, parent=parent, state=state, baggage=baggage
    )
    env = {"TRACEPARENT": carrier["traceparent"]}
    if state:
        env["TRACESTATE"] = state
    if baggage:
        env["BAGGAGE"] = baggage
    return RunTrace(span, context, env, cut_off)


def _cut_off_span(
    log_: EventLog, job_id: str, started: RecordedEvent, trace: TraceContext
) -> dict[str, Any] | None:
    """What ``tracing.emit`` needs to send the span of a run a crash cut off: its recorded
    ids, from its start to the record of its end (``job.suspended``), an error."""
    run = tracing.parts_of(trace.run)
    job = tracing.parts_of(trace.job)
    if run is None or job is None or not run[2]:
        return None
    later = log_.read_stream(ids.job(job_id), after_version=started.version)
    ended = next((e for e in later if e.event_type == "job.suspended"), None)
    positions = [started.position] + ([ended.position] if ended is not None else [])
    return {
        "span_id": run[1],
        "trace_id": run[0],
        "parent_id": job[1],
        "tracestate": trace.state,
        "baggage": trace.baggage,
        "start_ns": _ns(started.recorded_at),
        "end_ns": _ns(ended.recorded_at) if ended is not None else None,
        "attributes": {
            JOB: job_id,
            RUN: getattr(started.event, "run_id", ""),
            "process.pid": getattr(started.event, "pid", 0),
            OUTCOME: "cut off",
            POSITIONS: positions,
        },
        "failed": "the run was cut off (its server stopped or died)",
    }


def end_run(log_: EventLog, job_id: str, run_id: str, trace: RunTrace) -> None:
    """End a run's span with what the log recorded of it: its outcome, exit code and the
    positions of its start and end; if its end finished the job, send the job's span too.
    Never raises (a trace is no reason to fail a run)."""
    if not trace.span.is_on or trace.context is None:
        return
    try:
        _end_run(log_, job_id, run_id, trace.span, trace.context)
    except Exception:
        log.exception("the span of run %s could not be ended", run_id)
        trace.span.end()


def _end_run(
    log_: EventLog, job_id: str, run_id: str, span: tracing.Span, context: TraceContext
) -> None:
    events = log_.read_stream(ids.job(job_id))
    mine = next(
        (i for i, e in enumerate(events) if getattr(e.event, "run_id", None) == run_id), None
    )
    after = events[mine + 1 :] if mine is not None else []
    ended = next((e for e in after if e.event_type in _ENDS), None)
    positions = [events[mine].position] if mine is not None else []
    outcome = "cut off"
    if ended is not None:
        positions.append(ended.position)
        outcome = getattr(ended.event, "outcome", "") or ended.event_type.removeprefix("job.")
        span.set("process.exit.code", getattr(ended.event, "exit_code", None))
    span.set(OUTCOME, outcome)
    span.set(POSITIONS, positions)
    if outcome != "ok":
        span.fail(f"the run ended {outcome}")
    span.end()
    if ended is not None and ended.event_type == "job.finished":
        _send_job_span(events, ended, context)


_ENDS = ("job.finished", "job.suspended", "job.cancelled", "job.superseded", "job.paused")


def _send_job_span(events: list[RecordedEvent], ended: RecordedEvent, ctx: TraceContext) -> None:
    job = tracing.parts_of(ctx.job)
    if job is None or not job[2]:
        return
    accepted = events[0]
    event: Any = accepted.event
    outcome = getattr(ended.event, "outcome", "")
    tracing.emit(
        "job",
        span_id=job[1],
        trace_id=job[0],
        parent_id=ctx.parent,
        tracestate=ctx.state,
        baggage=ctx.baggage,
        start_ns=_ns(accepted.recorded_at),
        end_ns=_ns(ended.recorded_at),
        attributes={
            SESSION: getattr(event, "session", ""),
            JOB: accepted.stream_id.removeprefix("job:"),
            TASK: getattr(event, "task", None),
            AGENT: getattr(event, "agent", ""),
            OUTCOME: outcome,
            POSITIONS: [accepted.position, ended.position],
        },
        failed="" if outcome == "ok" else f"the job ended {outcome}",
    )


def job_carrier(log_: EventLog, job_id: str) -> dict[str, str]:
    """The job's span as W3C text, as its last run recorded it; {} if none was."""
    recorded = _started_with_trace(log_.read_stream(ids.job(job_id)))
    if recorded is None:
        return {}
    trace: TraceContext = recorded.event.trace  # type: ignore[attr-defined]
    return {"traceparent": trace.job, "tracestate": trace.state, "baggage": trace.baggage}


@contextlib.contextmanager
def job_span(log_: EventLog, job_id: str, name: str, **attributes: Any) -> Iterator[tracing.Span]:
    """A span of work done for a job (its notify hook), a child of the job's span; the
    positions it recorded are the caller's to set."""
    if not tracing.enabled():
        yield tracing.NOOP
        return
    carrier = job_carrier(log_, job_id)
    with tracing.span(
        name, carrier=carrier, attributes={JOB: job_id, **attributes}, root=bool(carrier)
    ) as span:
        yield span


def task_carrier(log_: EventLog, task_id: str) -> dict[str, str]:
    """The span of the latest job working for an A2A task, as W3C text; {} if none."""
    if not tracing.enabled():
        return {}
    jobs = queries.task_jobs(log_.connection(), task_id)
    return job_carrier(log_, jobs[-1]) if jobs else {}


def positions_since(
    log_: EventLog, stream_id: str, after: int, kinds: tuple[str, ...]
) -> list[int]:
    """The positions of ``kinds`` events of a stream recorded after position ``after``."""
    return [
        e.position
        for e in log_.read_stream(stream_id)
        if e.position > after and e.event_type in kinds
    ]
