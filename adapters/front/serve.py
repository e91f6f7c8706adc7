"""The front's two HTTP servers: the public one (the contract paths, proxied) and a loopback
one for the worker (``/ready``, ``/notify``).

Threaded stdlib servers (ADR 0036): one thread per connection, blocking sockets on both sides
of the proxy, so streaming both ways and a client's leaving are plain socket facts, and the
front needs no framework and holds no log. A handler that throws is logged and answered 500;
it never ends the front.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from adapters.front import hook, proxy, worker
from adapters.front.lifecycle import Front, forward_signals
from adapters.front.settings import SESSION_HEADER, FrontConfig, served, session_id_ok

log = logging.getLogger("foldline.front")
UPSTREAM_TIMEOUT_S = 3600.0  # a quiet stream is the worker's to end (its keepalives)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "foldline-front"
    front: Front  # set on the subclass each server gets

    def log_message(self, format: str, *args: Any) -> None:
        return  # no access log, as the worker's

    def answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status: int, text: str) -> None:
        self.answer(status, json.dumps({"error": text}).encode())

    def _guarded(self) -> None:
        try:
            self.route()
        except Exception:  # a bug must not end the front: this request gets a 500
            log.exception("front: %s %s failed", self.command, self.path)
            with contextlib.suppress(OSError):
                self.error(500, "internal error in the front")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _guarded

    def route(self) -> None:
        raise NotImplementedError


class PublicHandler(_Handler):
    def route(self) -> None:
        path = urlsplit(self.path).path
        front = self.front
        if path == "/ping":
            status, body = front.ping()
            self.answer(status, body)
            return
        if not served(path):
            self.error(404, f"no such path: {path}")
            return
        sid = self.headers.get(SESSION_HEADER)
        if not session_id_ok(sid):
            self.error(
                400,
                f"{SESSION_HEADER} must match ^[A-Za-z0-9][A-Za-z0-9_-]{{32,254}}$",
            )
            return
        assert sid is not None
        if not front.claim(sid):
            self.error(409, "this runtime serves another session id: it never switches")
            return
        starting = not front.serving
        refused = front.activate()
        if refused is not None:
            self.error(*refused)
            return
        if starting and proxy.client_gone(self.connection):
            # It waited for the worker's start; its caller left meanwhile: nothing of it
            # reaches the worker (a job nobody waits for would run).
            log.warning("front: client left while the worker started: request not forwarded")
            self.close_connection = True
            return
        proxy.forward(self, "127.0.0.1", front.config.worker_port, UPSTREAM_TIMEOUT_S)


class InternalHandler(_Handler):
    def route(self) -> None:
        path = urlsplit(self.path).path
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if self.command == "POST" and path == "/ready":
            if self.front.on_ready(token):
                self.answer(204, b"")
            else:
                self.error(404, "no worker is starting")
            return
        if self.command == "POST" and path == "/notify":
            self.notify(token)
            return
        self.error(404, f"no such path: {path}")

    def notify(self, token: str) -> None:
        front = self.front
        command = front.config.notify
        if not front.token_ok(token):
            self.error(403, "wrong token")
            return
        if not front.serving or command is None or front.sid is None:
            self.error(404, "no notify is taken now")
            return
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > hook.MAX_BODY:
            self.error(400, "a notify needs a Content-Length of at most 16 MiB")
            return
        fields = hook.parse(self.rfile.read(int(length)))
        if fields is None:
            self.error(400, "a notify is {id, session, status: ok|error, text}")
            return
        # 202 at once; the hook's outcome follows as the body when it ends (the worker
        # records it; a front gone meanwhile leaves the hook's end unrecorded: lost).
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self.wfile.flush()
        config = front.config
        front.hook_started()
        try:
            outcome = hook.run(
                command,
                fields,
                config.workspace,
                config.base / front.sid,
                front.env,
                config.notify_timeout_s,
            )
        finally:
            front.hook_ended()
        self.wfile.write(json.dumps(outcome).encode())


def _server(bind: tuple[str, int], handler: type[_Handler], front: Front) -> ThreadingHTTPServer:
    bound = type(handler.__name__, (handler,), {"front": front})
    server = _Quiet(bind, bound)
    server.daemon_threads = True
    return server


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that left mid-answer is no news; handlers log their own failures


def prepare(config: FrontConfig) -> tuple[FrontConfig, socket.socket]:
    """The boot's checks, before anything is served: the state directory made and within the
    worker's reach, the worker's port bound. The config with that port, and its socket.

    Raises:
        ConfigError: one line naming the state directory or the port, and why.
    """
    worker.prepare_state_dir(config)
    listener = worker.reserve_port(config)
    return replace(config, worker_port=listener.getsockname()[1]), listener


def run(config: FrontConfig, env: dict[str, str], listener: socket.socket) -> int:
    """Serve until the worker ends (``prepare``'s config and socket); the front's exit code."""
    front = Front(config, env, listener)
    internal = _server(("127.0.0.1", 0), InternalHandler, front)
    front.internal_url = f"http://127.0.0.1:{internal.server_address[1]}"
    host, _, port = config.bind.rpartition(":")
    public = _server((host.strip("[]"), int(port)), PublicHandler, front)
    for server in (internal, public):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    forward_signals(front)
    print(
        json.dumps(
            {
                "front": config.bind,
                "base": str(config.base),
                "workspace": str(config.workspace),
                "worker": f"127.0.0.1:{config.worker_port} as {config.run_user.name}",
                "notify": "set" if config.notify else None,
            }
        ),
        flush=True,
    )
    code = front.wait_for_end()
    print(f"foldline front: exiting {code}", file=sys.stderr, flush=True)
    return code
