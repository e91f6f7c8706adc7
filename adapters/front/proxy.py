"""One request through to the worker and back, streamed both ways.

- Hop-by-hop headers (RFC 9110 §7.6.1, and any the ``Connection`` header names) are dropped
  in both directions.
- The request body goes up as it arrives (``Content-Length`` or chunked), the answer comes
  down as the worker writes it: with the worker's length when it gave one, else chunked, one
  chunk per piece the worker flushed (an SSE event reaches the client when the worker sends it).
- A client that leaves aborts the upstream request: a watcher sees the client's socket end
  and shuts the upstream socket, which ends the worker's stream on its side too.
- A worker answer cut off mid-body closes the client's connection without the body's end, so
  no client waits on a dead stream or takes a cut body for a whole one.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import select
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

log = logging.getLogger("foldline.front")
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
BLOCK = 64 * 1024
TCP_ESTABLISHED = 1  # tcp_info's first byte: the connection's state


class ClientGone(Exception):
    """The client closed its connection before the request body was all read."""


def end_to_end(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` without the hop-by-hop ones."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
    }
    return [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP and n.lower() not in named]


def _request_body(handler: BaseHTTPRequestHandler) -> Iterator[bytes]:
    """The client's body as it arrives (raises ``ClientGone`` when it stops short)."""
    if "chunked" in handler.headers.get("Transfer-Encoding", "").lower():
        while True:
            size_line = handler.rfile.readline(1024)
            if not size_line:
                raise ClientGone
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers, dropped
                return
            data = handler.rfile.read(size + 2)[:size]
            if len(data) < size:
                raise ClientGone
            yield data
    left = int(handler.headers.get("Content-Length") or 0)
    while left > 0:
        data = handler.rfile.read1(min(left, BLOCK))
        if not data:
            raise ClientGone
        left -= len(data)
        yield data


def client_gone(client: socket.socket) -> bool:
    """Whether the client has closed its side (a FIN or a reset), whatever it sent before:
    the TCP state, not a read, so a body still unread does not hide the close."""
    try:
        info = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)
    except OSError:
        return True
    return info[0] != TCP_ESTABLISHED


def _watch_client(client: socket.socket, upstream: socket.socket, done: threading.Event) -> None:
    """Shut ``upstream`` when ``client`` ends before ``done`` is set."""
    while not done.is_set():
        try:
            readable, _, _ = select.select([client], [], [], 0.2)
        except (OSError, ValueError):  # the connection is closed: the answer is over
            return
        if not readable:
            continue
        try:
            gone = client.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            gone = True
        if gone and not done.is_set():
            log.warning("front: client left, upstream request aborted")
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_RDWR)
        return  # data from the client (a next request): nothing more to learn here


def forward(handler: BaseHTTPRequestHandler, host: str, port: int, timeout: float) -> None:
    """Send ``handler``'s request to ``host:port`` and its answer back to the client."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = end_to_end(list(handler.headers.items()))
    headers = [(n, v) for n, v in headers if n.lower() not in ("host", "content-length")]
    chunked_up = "chunked" in handler.headers.get("Transfer-Encoding", "").lower()
    try:
        conn.putrequest(handler.command, handler.path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", f"{host}:{port}")
        for name, value in headers:
            conn.putheader(name, value)
        if chunked_up:
            conn.putheader("Transfer-Encoding", "chunked")
        elif handler.headers.get("Content-Length"):
            conn.putheader("Content-Length", handler.headers["Content-Length"])
        conn.endheaders()
        for data in _request_body(handler):
            conn.send(b"%x\r\n%s\r\n" % (len(data), data) if chunked_up else data)
        if chunked_up:
            conn.send(b"0\r\n\r\n")
        answer = conn.getresponse()
    except ClientGone:
        conn.close()
        handler.close_connection = True
        return
    done = threading.Event()
    assert conn.sock is not None
    watcher = threading.Thread(
        target=_watch_client, args=(handler.connection, conn.sock, done), daemon=True
    )
    watcher.start()
    try:
        _relay(handler, answer)
    finally:
        done.set()
        conn.close()


def _relay(handler: BaseHTTPRequestHandler, answer: http.client.HTTPResponse) -> None:
    length = answer.getheader("Content-Length")
    head = [(n, v) for n, v in end_to_end(answer.getheaders()) if n.lower() != "content-length"]
    handler.send_response_only(answer.status, answer.reason)
    for name, value in head:
        handler.send_header(name, value)
    bodiless = handler.command == "HEAD" or answer.status in (204, 304)
    if length is not None:
        handler.send_header("Content-Length", length)
    elif not bodiless:
        handler.send_header("Transfer-Encoding", "chunked")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.close_connection = True
    if bodiless:
        return
    out = handler.wfile
    while True:
        try:
            data = answer.read1(BLOCK)
        except (OSError, http.client.HTTPException) as ex:
            log.warning("front: worker response cut off mid-stream (%s)", type(ex).__name__)
            _cut(handler)
            return
        if not data:
            break
        try:
            out.write(data if length is not None else b"%x\r\n%s\r\n" % (len(data), data))
            out.flush()
        except OSError:
            return  # the client left: the caller closes the upstream connection
    if length is not None and answer.length:  # the worker closed before the bytes it said
        log.warning("front: worker response cut off mid-stream")
        _cut(handler)
        return
    if length is None:
        out.write(b"0\r\n\r\n")
        out.flush()


def _cut(handler: BaseHTTPRequestHandler) -> None:
    """End the client's connection at once, without a body's end (a reset, not a FIN)."""
    sock = handler.connection
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
