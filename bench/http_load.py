"""``ratio.invocation_vs_trivial_get``: an async ``POST /invocations`` plus its ``get`` through
gunicorn, against a trivial Falcon GET served with the same gunicorn settings.

Both servers run on 127.0.0.1 with the same workers and threads; a bounded load generator
(client threads with keep-alive connections, a fixed duration) counts completed operations.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKERS, THREADS = 2, 16


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def server(
    command: list[str], port: int, probe: str, env: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server until the ``with`` block ends, once ``probe`` answers 200."""
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", probe)
                if conn.getresponse().status == 200:
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"the server on port {port} never answered {probe}")
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _load(
    port: int, operation: Callable[[http.client.HTTPConnection], None], clients: int, seconds: float
) -> float:
    """Completed operations per second over ``seconds`` with ``clients`` threads."""
    done = [0] * clients
    stop_at = time.monotonic() + seconds

    def client(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < stop_at:
            operation(conn)
            done[index] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 60)
    return sum(done) / (time.monotonic() - started)


def _trivial(conn: http.client.HTTPConnection) -> None:
    conn.request("GET", "/trivial")
    answer = conn.getresponse()
    answer.read()
    assert answer.status == 200


def _invocation(conn: http.client.HTTPConnection) -> None:
    conn.request("POST", "/invocations", body=b'{"prompt": "bench", "async": true}')
    answer = conn.getresponse()
    receipt = json.loads(answer.read())
    assert answer.status == 200, receipt
    conn.request("POST", "/invocations", body=json.dumps({"get": receipt["invocation"]}))
    answer = conn.getresponse()
    answer.read()
    assert answer.status == 200


def bench_http(seconds: float, clients: int = 8) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="foldline-http-bench-") as folder:
        port = free_port()
        gunicorn = [
            sys.executable,
            "-m",
            "gunicorn",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(WORKERS),
            "--worker-class",
            "gthread",
            "--threads",
            str(THREADS),
            "--no-control-socket",
            "--log-level",
            "warning",
            "bench.trivial_app:app",
        ]
        with server(gunicorn, port, "/trivial", {}):
            trivial = _load(port, _trivial, clients, seconds)
        port = free_port()
        serve = [
            sys.executable,
            "-m",
            "adapters.cli",
            "serve",
            "--workspace",
            folder,
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(WORKERS),
            "--threads",
            str(THREADS),
        ]
        with server(serve, port, "/ping", {"FOLDLINE_RUNNER": "cat"}):
            ours = _load(port, _invocation, clients, seconds)
    return {
        "http.trivial_get_per_s": trivial,
        "http.invocation_and_get_per_s": ours,
        "ratio.invocation_vs_trivial_get": ours / trivial,
    }
