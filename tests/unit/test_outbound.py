"""Outbound requests end at their deadline, whatever the peer does (issue 30): a peer that
drips its status line, or its body, a byte at a time cannot hold a delivery or a fetch."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from adapters.http.a2a.message_files import FetchFailed, fetch
from adapters.services.push import post
from adapters.system.url_policy import UrlPolicy


@contextmanager
def dripping(head_first: bool) -> Iterator[str]:
    """A peer that answers a byte every 0.2 s for 20 s: the status line itself, or (with
    ``head_first``) a whole head and then the body."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        with server:
            server.settimeout(5)
            try:
                peer, _ = server.accept()
            except OSError:
                return
            with peer:
                peer.recv(65536)
                if head_first:
                    peer.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
                text = b"HTTP/1.1 200 OK\r\n" if not head_first else b"x" * 100
                for byte in text:
                    if stop.wait(0.2):
                        return
                    try:
                        peer.sendall(bytes([byte]))
                    except OSError:
                        return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/"
    finally:
        stop.set()
        thread.join(10)


@pytest.mark.parametrize("head_first", [False, True])
def test_outbound_a_push_request_ends_at_its_deadline(head_first: bool) -> None:
    with dripping(head_first) as url:
        started = time.monotonic()
        status, error = post(url, b"{}", {}, 1.0)
        spent = time.monotonic() - started
    assert spent < 3, spent  # the peer would drip for 20 s
    if head_first:
        assert status == 200  # the answer came in time; its body is not waited for
    else:
        assert (status, error) == (0, "no answer within 1 s")


@pytest.mark.parametrize("head_first", [False, True])
def test_outbound_a_fetch_ends_at_its_deadline(head_first: bool) -> None:
    with dripping(head_first) as url:
        started = time.monotonic()
        with pytest.raises(FetchFailed, match="took over 1 s"):
            fetch(url, UrlPolicy(["127.0.0.1"]), timeout_s=1.0)
        spent = time.monotonic() - started
    assert spent < 3, spent
