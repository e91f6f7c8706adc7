"""An OTLP/HTTP trace receiver on loopback for tracing tests: it takes ``POST /v1/traces``,
decodes the protobuf body with the protocol's own messages (``opentelemetry-proto``) and keeps
every span, with its resource, in arrival order."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class Got:
    """One span as it came over the wire: ids in W3C hex, links as (trace id, span id)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    kind: int
    links: tuple[tuple[str, str], ...]
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status: int  # 0 unset, 1 ok, 2 error

    def line(self) -> str:
        """How a test's failure (and the closing note) shows the span."""
        links = ",".join(f"{t}/{s}" for t, s in self.links) or "-"
        return (
            f"{self.name} trace={self.trace_id} span={self.span_id}"
            f" parent={self.parent_id or '-'} links={links}"
        )


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass
class Receiver:
    url: str = ""
    spans: list[Got] = field(default_factory=list)
    requests: int = 0
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(
        self, match: Callable[[list[Got]], bool], what: str, limit: float = 60
    ) -> list[Got]:
        """The spans once ``match`` holds for them (bounded in time)."""
        deadline = time.monotonic() + limit
        with self.arrived:
            while not match(self.spans):
                left = deadline - time.monotonic()
                shown = "\n".join(got.line() for got in self.spans)
                assert left > 0, f"no {what} within {limit} s; received:\n{shown}"
                self.arrived.wait(min(left, 1))
            return list(self.spans)

    def named(self, name: str) -> list[Got]:
        with self.arrived:
            return [got for got in self.spans if got.name == name]

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        got = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    got.append(
                        Got(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            links=tuple((k.trace_id.hex(), k.span_id.hex()) for k in span.links),
                            attributes=_attributes(span.attributes),
                            resource=resource,
                            status=span.status.code,
                        )
                    )
        with self.arrived:
            self.requests += 1
            self.spans.extend(got)
            self.arrived.notify_all()


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver on a free loopback port; ``url`` is the value for
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter adds ``/v1/traces``)."""
    got = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            got.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    got.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()


def otel_env(receiver: Receiver, **more: str) -> dict[str, str]:
    """What a server needs to export to ``receiver`` at once: its endpoint, and a batch
    delay short enough that a test waits on spans, not on the processor."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
        **more,
    }
