"""Traces over OpenTelemetry (ADR 0059): one thin API the rest of the server calls, and the
only module that knows the SDK.

- On only when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (and ``OTEL_SDK_DISABLED`` is not true).
  Off, every helper returns at once and nothing of ``opentelemetry`` is imported: the hot
  path pays one environment lookup.
- On, the tracer provider is made lazily, once per process (a gunicorn worker makes its own
  after the fork: a provider's export thread does not survive one), with a batch processor
  exporting OTLP/HTTP protobuf. The SDK reads the rest of ``OTEL_*`` itself (headers,
  timeouts, sampler, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*``); ``service.name`` is
  ``foldline`` unless ``OTEL_SERVICE_NAME`` or the resource attributes name another.
- A context crosses processes and the log as W3C text: ``traceparent``, ``tracestate`` and
  ``baggage``, the HTTP headers' and the run environment's format.
- A span whose process died before it ended can be sent afterwards by another process with
  the ids recorded for it (``emit``): a job's span and a cut-off run's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

log = logging.getLogger("foldline.tracing")
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SERVICE_NAME = "foldline"
CARRIER_KEYS = ("traceparent", "tracestate", "baggage")
Attributes = Mapping[str, str | int | float | bool | Sequence[int] | Sequence[str] | None]


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether traces are exported: an OTLP endpoint is set and the SDK is not disabled."""
    if not any(environ.get(name) for name in ENDPOINTS):
        return False
    return environ.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"


class _Process:
    """This process's provider, made at its first span (after a fork, made again)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = -1
        self.provider: Any = None
        self.tracer: Any = None
        self.pinned = threading.local()


_here = _Process()


def _tracer() -> Any:
    with _here.lock:
        if _here.pid != os.getpid():
            _here.provider = _make_provider()
            _here.tracer = _here.provider.get_tracer("foldline")
            _here.pid = os.getpid()
        return _here.tracer


def _make_provider() -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class PinnedIds(RandomIdGenerator):
        """Random ids, except the ones ``emit`` pins for the next span of its thread."""

        def generate_span_id(self) -> int:
            pinned = getattr(_here.pinned, "span_id", None)
            if pinned is not None:
                _here.pinned.span_id = None
                return int(pinned)
            return super().generate_span_id()

        def generate_trace_id(self) -> int:
            pinned = getattr(_here.pinned, "trace_id", None)
            if pinned is not None:
                _here.pinned.trace_id = None
                return int(pinned)
            return super().generate_trace_id()

    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol != "http/protobuf":
        log.warning("OTLP protocol %s is not supported: traces go out as http/protobuf", protocol)
    named = "OTEL_SERVICE_NAME" in os.environ or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    resource = Resource.create({} if named else {"service.name": SERVICE_NAME})
    provider = TracerProvider(resource=resource, id_generator=PinnedIds())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    log.info("traces go out over OTLP/HTTP (service %s)", resource.attributes["service.name"])
    return provider


def shutdown() -> None:
    """Send what is queued and stop this process's exporter (a worker's or a master's exit)."""
    with _here.lock:
        provider, pid = _here.provider, _here.pid
        _here.pid, _here.provider, _here.tracer = -1, None, None
    if provider is not None and pid == os.getpid():
        provider.shutdown()


def new_span_id() -> str:
    """A span id as W3C writes it: 16 lowercase hex digits, never all zero."""
    while True:
        value = secrets.token_hex(8)
        if value != "0" * 16:
            return value


def new_trace_id() -> str:
    """A trace id as W3C writes it: 32 lowercase hex digits, never all zero."""
    while True:
        value = secrets.token_hex(16)
        if value != "0" * 32:
            return value


def traceparent(trace_id: str, span_id: str, sampled: bool = True) -> str:
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"


def parts_of(value: str) -> tuple[str, str, bool] | None:
    """A ``traceparent``'s trace id, span id and sampled flag; None if it is malformed."""
    fields = value.split("-")
    if len(fields) != 4 or len(fields[1]) != 32 or len(fields[2]) != 16 or len(fields[3]) != 2:
        return None
    try:
        sampled = bool(int(fields[3], 16) & 1)
        int(fields[1], 16), int(fields[2], 16)
    except ValueError:
        return None
    return fields[1], fields[2], sampled


class Span:
    """A span of foldline's, or nothing at all (``NOOP``) when tracing is off: every method
    is safe to call either way, so callers never ask."""

    __slots__ = ("_context", "_span")

    def __init__(self, span: Any = None, context: Any = None) -> None:
        self._span = span
        self._context = context

    @property
    def is_on(self) -> bool:
        return self._span is not None

    def set(self, key: str, value: Any) -> None:
        """One attribute (``None`` and "" are left out)."""
        if self._span is not None and value is not None and value != "":
            self._span.set_attribute(key, value)

    def set_all(self, attributes: Attributes) -> None:
        for key, value in attributes.items():
            self.set(key, value)

    def rename(self, name: str) -> None:
        if self._span is not None:
            self._span.update_name(name)

    def fail(self, description: str) -> None:
        """Mark the span's status an error (its outcome failed, or it was cut off)."""
        if self._span is not None:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR, description[:500]))

    def carrier(self) -> dict[str, str]:
        """This span as W3C text: ``traceparent``, and ``tracestate``/``baggage`` if any."""
        if self._span is None:
            return {}
        from opentelemetry import trace
        from opentelemetry.baggage.propagation import W3CBaggagePropagator
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        out: dict[str, str] = {}
        ctx = trace.set_span_in_context(self._span, self._context)
        TraceContextTextMapPropagator().inject(out, ctx)
        W3CBaggagePropagator().inject(out, ctx)
        return out

    def end(self, end_ns: int | None = None) -> None:
        if self._span is not None:
            self._span.end(end_time=end_ns)


NOOP = Span()


def start(
    name: str,
    *,
    carrier: Mapping[str, str] | None = None,
    links: Sequence[str] = (),
    attributes: Attributes | None = None,
    kind: str = "internal",
    start_ns: int | None = None,
    root: bool = False,
) -> Span:
    """Start a span: a child of ``carrier`` (W3C headers, any case) if it names a valid
    parent, else of this thread's current span (unless ``root``), else a new trace's root.
    ``links`` are ``traceparent`` values of spans it follows from. ``NOOP`` when tracing is
    off."""
    if not enabled():
        return NOOP
    from opentelemetry import context as context_api
    from opentelemetry import trace
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    tracer = _tracer()
    parent = context_api.Context() if root else context_api.get_current()
    if carrier:
        lowered = {k.lower(): v for k, v in carrier.items() if k.lower() in CARRIER_KEYS and v}
        if "traceparent" in lowered:
            parent = TraceContextTextMapPropagator().extract(lowered, context=parent)
        if "baggage" in lowered:
            parent = W3CBaggagePropagator().extract(lowered, context=parent)
    linked = []
    for value in links:
        parts = parts_of(value)
        if parts is not None:
            span_context = trace.SpanContext(
                int(parts[0], 16),
                int(parts[1], 16),
                is_remote=True,
                trace_flags=trace.TraceFlags(1 if parts[2] else 0),
            )
            linked.append(trace.Link(span_context))
    span = tracer.start_span(
        name,
        context=parent,
        kind=getattr(trace.SpanKind, kind.upper()),
        links=linked,
        start_time=start_ns,
    )
    handle = Span(span, parent)
    handle.set_all(attributes or {})
    return handle


def emit(
    name: str,
    *,
    span_id: str,
    trace_id: str,
    parent_id: str = "",
    tracestate: str = "",
    baggage: str = "",
    start_ns: int,
    end_ns: int | None = None,
    links: Sequence[str] = (),
    attributes: Attributes | None = None,
    failed: str = "",
) -> None:
    """Send a span with ids chosen before: one whose process may have died before it ended
    (a job's, begun at its acceptance; a run cut off by a crash), sent by the process that
    records its end. Nothing when tracing is off."""
    if not enabled():
        return
    _tracer()
    carrier = {}
    if parent_id:
        carrier = {"traceparent": traceparent(trace_id, parent_id), "tracestate": tracestate}
    else:
        _here.pinned.trace_id = int(trace_id, 16)
    if baggage:
        carrier["baggage"] = baggage
    _here.pinned.span_id = int(span_id, 16)
    try:
        span = start(
            name,
            carrier=carrier,
            links=links,
            attributes=attributes,
            start_ns=start_ns,
            root=True,
        )
    finally:
        _here.pinned.span_id = _here.pinned.trace_id = None
    if failed:
        span.fail(failed)
    span.end(end_ns)


@contextlib.contextmanager
def activated(span: Span) -> Iterator[Span]:
    """``span`` is this thread's current span (and its baggage the current baggage) inside."""
    if span._span is None:
        yield span
        return
    from opentelemetry import context as context_api
    from opentelemetry import trace

    token = context_api.attach(trace.set_span_in_context(span._span, span._context))
    try:
        yield span
    finally:
        context_api.detach(token)


@contextlib.contextmanager
def span(
    name: str,
    *,
    carrier: Mapping[str, str] | None = None,
    links: Sequence[str] = (),
    attributes: Attributes | None = None,
    kind: str = "internal",
    root: bool = False,
) -> Iterator[Span]:
    """``start`` a span, current inside; it ends on the way out, an error if one escapes."""
    handle = start(name, carrier=carrier, links=links, attributes=attributes, kind=kind, root=root)
    try:
        with activated(handle):
            yield handle
    except BaseException as ex:
        handle.fail(f"{type(ex).__name__}: {ex}")
        raise
    finally:
        handle.end()


def current() -> dict[str, str]:
    """This thread's current span context as W3C text (``traceparent``, ``tracestate``,
    ``baggage``); {} when tracing is off or no span is current."""
    if not enabled():
        return {}
    from opentelemetry import context as context_api
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    out: dict[str, str] = {}
    ctx = context_api.get_current()
    TraceContextTextMapPropagator().inject(out, ctx)
    W3CBaggagePropagator().inject(out, ctx)
    return out


def log_ids() -> tuple[str, str] | None:
    """The trace and span id of this thread's current span, for a log line; None when
    tracing is off (nothing imported) or no span is current."""
    if _here.tracer is None:
        return None
    from opentelemetry import trace

    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"
