"""The front's proxy with a real worker: an SSE invocation arrives chunk by chunk, a client
that leaves ends the upstream request, a handler that throws is a 500."""

from __future__ import annotations

import http.client
import json
import os
import socket

import pytest

from tests.support.front import HEADER, SID_A, established_to, front, place, wait_until

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="the front needs root (mounts)"),
]
# Says one word, then waits (bounded) for the test's go-ahead file before the second.
GATED = (
    'cat >/dev/null; printf "first "; i=0;'
    ' while [ ! -e go ] && [ "$i" -lt 600 ]; do sleep 0.05; i=$((i + 1)); done; printf second'
)


def _events(answer: http.client.HTTPResponse) -> list[tuple[str, str]]:
    """Read SSE events until one with data arrives (comments are skipped)."""
    name, got = "", []
    while not got:
        line = answer.fp.readline().decode()
        assert line, "stream ended"
        if line.startswith("event: "):
            name = line[7:].strip()
        elif line.startswith("data: "):
            got.append((name, line[6:].strip()))
    return got


def test_front_streams_an_sse_invocation_chunk_by_chunk() -> None:
    with place() as where:
        where.mount()
        with front(where, {"FOLDLINE_RUNNER": GATED}) as served:
            conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
            conn.request(
                "POST",
                "/invocations",
                json.dumps({"prompt": "go"}),
                {HEADER: SID_A, "Accept": "text/event-stream", "Content-Type": "application/json"},
            )
            answer = conn.getresponse()
            assert answer.status == 200
            assert answer.getheader("Content-Type") == "text/event-stream"
            assert answer.getheader("Transfer-Encoding") == "chunked"
            seen: list[tuple[str, str]] = []
            while not any(n == "delta" for n, _ in seen):
                seen += _events(answer)
            assert [json.loads(d)["text"] for n, d in seen if n == "delta"] == ["first "]
            (where.base / SID_A / "go").write_text("")  # only now may the second word come
            while not any(n == "result" for n, _ in seen):
                seen += _events(answer)
            result = json.loads(next(d for n, d in seen if n == "result"))
            assert result["result"] == "first second"
            conn.close()


def test_front_client_leaving_aborts_the_upstream_request() -> None:
    with place() as where:
        where.mount()
        with front(where, {"FOLDLINE_RUNNER": GATED}) as served:
            assert served.request("GET", "/.well-known/agent-card.json")[0] == 200  # started
            wait_until(lambda: established_to(served.worker_port) == 0, what="idle upstream")
            client = socket.create_connection(("127.0.0.1", served.port), timeout=30)
            body = json.dumps({"prompt": "left"}).encode()
            client.sendall(
                b"POST /invocations HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
                + f"{HEADER}: {SID_A}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
            assert established_to(served.worker_port) >= 1
            client.close()
            wait_until(lambda: established_to(served.worker_port) == 0, what="upstream closed")
            assert "client left, upstream request aborted" in served.output()
