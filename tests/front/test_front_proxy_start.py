"""The proxy at the worker's start and with a chunked body: a request whose client left while
the worker started reaches nothing (no job nobody waits for), and a chunked request body
reaches the worker whole."""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections.abc import Iterator

import pytest

from tests.support.front import HEADER, SID_A, front, place, wait_until

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="the front needs root (mounts)"),
]


def test_a_request_whose_client_left_while_the_worker_started_is_not_forwarded() -> None:
    with place() as where:
        where.mount()
        with front(where) as served:
            body = json.dumps({"prompt": "left", "id": "k-left", "async": True}).encode()
            client = socket.create_connection(("127.0.0.1", served.port), timeout=30)
            client.sendall(
                b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"{HEADER}: {SID_A}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            client.close()  # long before a worker can be up: the request waits for it
            wait_until(lambda: "request not forwarded" in served.output(), what="the front's word")
            status, answer = served.invoke({"get": "k-left"})
            assert status == 404, answer  # the worker never saw it: no job
            status, answer = served.invoke({"prompt": "stayed", "id": "k-stayed"})
            assert status == 200 and answer["result"] == "echo: stayed\n", answer


def test_a_chunked_request_body_reaches_the_worker() -> None:
    with place() as where:
        where.mount()
        with front(where, {"FOLDLINE_RUNNER": "cat"}) as served:
            text = json.dumps({"prompt": "in" + " pieces" * 2000, "id": "k-chunked"}).encode()

            def pieces() -> Iterator[bytes]:
                for at in range(0, len(text), 1000):
                    yield text[at : at + 1000]

            conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
            conn.request(
                "POST",
                "/invocations",
                pieces(),
                {HEADER: SID_A, "Content-Type": "application/json"},
                encode_chunked=True,
            )
            answer = conn.getresponse()
            body = json.loads(answer.read())
            conn.close()
            assert answer.status == 200, body
            assert body["result"].strip() == "in" + " pieces" * 2000  # the prompt, every byte
