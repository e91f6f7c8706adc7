"""A real ``foldline serve`` (gunicorn) on a free loopback port, for server tests."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The operator token test servers get unless a test passes its own FOLDLINE_TOKEN ("" makes the
# server generate one at first activation); ``Server.request`` sends it on guarded paths.
OPERATOR_TOKEN = "test-operator-token"
GUARDED = ("/v1/", "/console/api/")


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports for test servers come from below the kernel's ephemeral range: a port found free with
# bind(0) lies in that range, and can be handed to any process's next connection or bind(0)
# (a front's own loopback server, say) before the test's server binds it.
ALL_TEST_PORTS = range(10000, max(10001, _ephemeral_floor()))


def _worker_ports(ports: range, env: dict[str, str]) -> range:
    """This pytest-xdist worker's share of ``ports`` (every ``count``-th, from its index), so
    that two workers never pick the same port between one's probe and its server's bind; the
    whole range outside xdist."""
    worker, count = env.get("PYTEST_XDIST_WORKER", ""), env.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker.startswith("gw") or not count:
        return ports
    return ports[int(worker.removeprefix("gw")) :: int(count)]


TEST_PORTS = _worker_ports(ALL_TEST_PORTS, dict(os.environ))
_given: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, outside the ephemeral range, not given before."""
    for _ in range(500):
        port = random.choice(TEST_PORTS)
        if port in _given:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise AssertionError("no free loopback port below the ephemeral range")


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    workspace: Path
    token: str | None = OPERATOR_TOKEN  # what ``request`` sends on /v1 and /console/api

    def connection(self, timeout: float = 30) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
        authorize: bool = True,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request; on /v1 and /console/api it carries the operator token unless the
        headers have an ``Authorization`` of their own or ``authorize`` is False."""
        headers = dict(headers or {})
        if authorize and self.token and path.startswith(GUARDED):
            headers.setdefault("Authorization", f"Bearer {self.token}")
        conn = self.connection(timeout)
        try:
            payload = body if isinstance(body, bytes) or body is None else json.dumps(body)
            conn.request(method, path, body=payload, headers=headers)
            answer = conn.getresponse()
            return answer.status, dict(answer.getheaders()), answer.read()
        finally:
            conn.close()

    def invoke(self, body: Any, timeout: float = 30) -> tuple[int, Any]:
        status, _, raw = self.request("POST", "/invocations", body, timeout=timeout)
        return status, json.loads(raw)


@contextlib.contextmanager
def serve(
    workspace: Path,
    env: dict[str, str] | None = None,
    workers: int = 1,
    threads: int = 16,
    port: int | None = None,
    args: Sequence[str] = (),
    prefix: Sequence[str] = (),
) -> Iterator[Server]:
    """Start the server, wait until /ping answers (at most 30 s), stop it with SIGTERM."""
    port = port or free_port()
    full_env = {
        **os.environ,
        "FOLDLINE_SSE_KEEPALIVE_S": "0.3",
        # The anchor of each test's log stays beside its workspace, not in the machine's state.
        "FOLDLINE_STATE_DIR": str(workspace.parent / f"{workspace.name}.state"),
        # Test runners live in the test's own (root-only) temporary directory and run the venv's
        # Python: they run as the server's user unless a test asks for the default run user
        # (tests/http/test_hostile_runner.py does).
        **({"FOLDLINE_RUN_USER": "root"} if os.geteuid() == 0 else {}),
        "FOLDLINE_TOKEN": OPERATOR_TOKEN,
        # gunicorn's level before FOLDLINE_LOG_LEVEL existed: a test's stderr pipe, read only
        # by the tests that look for a line, stays as quiet as it was (a test may ask for more).
        "FOLDLINE_LOG_LEVEL": "warning",
        **(env or {}),
    }
    process = subprocess.Popen(
        [
            *prefix,  # e.g. setpriv: the server as another user
            sys.executable,
            "-m",
            "adapters.cli",
            "serve",
            "--workspace",
            str(workspace),
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            *args,
        ],
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    server = Server(process, port, workspace, full_env["FOLDLINE_TOKEN"] or None)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stderr.read().decode()  # type: ignore[union-attr]
            with contextlib.suppress(OSError):
                if server.request("GET", "/ping", timeout=2)[0] == 200:
                    break
            assert time.monotonic() < deadline, "server did not answer /ping within 30 s"
            time.sleep(0.05)
        yield server
    finally:
        stop(process)


def read_until(server: Server, text: str, limit: float = 30) -> str:
    """The server's stderr up to a line that holds ``text`` (bounded in time)."""
    assert server.process.stderr is not None
    fd, read, deadline = server.process.stderr.fileno(), b"", time.monotonic() + limit
    while text.encode() not in read:
        left = deadline - time.monotonic()
        assert left > 0 and select.select([fd], [], [], left)[0], f"no {text!r} in {read!r}"
        chunk = os.read(fd, 1 << 16)
        assert chunk, f"stderr closed before {text!r}: {read!r}"
        read += chunk
    return read.decode()


def poll_invocation(server: Server, key: str, until: str, limit: float = 30) -> dict[str, Any]:
    """Ask for an invocation (``{"get": key}``) until its status is ``until`` (bounded)."""
    deadline = time.monotonic() + limit
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status, body = server.invoke({"get": key})
        assert status == 200
        if body["status"] == until:
            return body
        time.sleep(0.1)
    raise AssertionError(f"{key} never reached {until}: {body}")


def stop(process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def read_events(answer: http.client.HTTPResponse, limit: float = 30) -> Iterator[dict[str, str]]:
    """Parse an SSE response into dicts (``event``, ``id``, ``data``, ``comment``)."""
    deadline = time.monotonic() + limit
    block: dict[str, str] = {}
    while time.monotonic() < deadline:
        line = answer.readline()
        if not line:
            return
        text = line.decode().rstrip("\n")
        if not text:
            if block:
                yield block
            block = {}
        elif text.startswith(":"):
            yield {"comment": text[1:].strip()}
        else:
            name, _, value = text.partition(": ")
            block[name] = value


# A runner whose "slow ..." prompts outlive a SIGKILLed server (and say whether they were
# resumed), and lease timings short enough for a takeover within a test's patience.
RECOVERY_RUNNER = (
    'read -r p; case "$p" in '
    'slow*) sleep 3; echo "done: $p resumed=$FOLDLINE_RESUMED";; '
    '*) echo "echo: $p";; esac'
)
RECOVERY_ENV = {
    "FOLDLINE_RUNNER": RECOVERY_RUNNER,
    "FOLDLINE_LEASE_RENEW_S": "0.5",
    "FOLDLINE_LEASE_STALE_S": "2",
    "FOLDLINE_LEASE_CONFIRM_S": "0.2",
}
