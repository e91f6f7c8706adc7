"""The front's public server in-process over a stand-in worker: a worker answer cut off
mid-body reaches the client as a cut, hop-by-hop headers are dropped, a handler that throws is
a 500 and the server goes on."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from adapters.front import serve
from tests.support.front import HEADER, SID_A


class StandIn:
    """A one-answer-per-connection worker that sends ``raw`` and closes."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                self.requests.append(head)
                conn.sendall(self.raw)


class StubFront:
    def __init__(self, port: int, broken: bool = False) -> None:
        self.config = SimpleNamespace(worker_port=port)
        self.broken = broken
        self.serving = True  # a worker up: the start path's checks do not apply

    def ping(self) -> tuple[int, bytes]:
        raise RuntimeError("a bug")

    def claim(self, sid: str) -> bool:
        return True

    def activate(self) -> Any:
        if self.broken:
            raise RuntimeError("a bug")
        return None


@contextlib.contextmanager
def public(stub: StubFront) -> Iterator[int]:
    server = serve._server(("127.0.0.1", 0), serve.PublicHandler, stub)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _get(port: int) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/v1/jobs", headers={HEADER: SID_A, "Connection": "keep-alive, X-Drop"})
    return conn.getresponse()


def test_front_a_chunked_answer_cut_off_is_a_cut_for_the_client() -> None:
    worker = StandIn(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
    with public(StubFront(worker.port)) as port:
        answer = _get(port)
        assert answer.status == 200
        with pytest.raises(http.client.IncompleteRead):
            answer.read()


def test_front_an_answer_shorter_than_its_length_is_a_cut_and_hop_headers_go() -> None:
    worker = StandIn(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nKeep-Alive: timeout=5\r\nX-Drop: 1\r\n"
        b"Connection: X-Drop\r\nX-Kept: yes\r\n\r\nonly ten b"
    )
    with public(StubFront(worker.port)) as port:
        answer = _get(port)
        assert answer.getheader("X-Kept") == "yes"
        assert answer.getheader("Keep-Alive") is None and answer.getheader("X-Drop") is None
        with pytest.raises((http.client.IncompleteRead, ConnectionResetError)):
            answer.read()
    sent = worker.requests[0].decode().lower()
    assert "x-drop" not in sent and "connection: keep-alive" not in sent


def test_front_a_handler_that_throws_is_a_500_and_the_server_goes_on() -> None:
    with public(StubFront(1, broken=True)) as port:
        for _ in range(2):
            assert _get(port).status == 500
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/ping")
            assert conn.getresponse().status == 500
