"""Real ``foldline front`` processes over a tmpfs base, for the session-dirs tests (root only).

As on a real host, the fronts of one place share one state directory and pick their workers'
ports themselves (a test may still set ``FOLDLINE_STATE_DIR`` or ``FOLDLINE_WORKER_PORT``).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.server import ROOT, free_port

HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
SID_A = "session-a-" + "a" * 30
SID_B = "session-b-" + "b" * 30


@dataclass
class Place:
    """A test's directories: ``base`` (mounted or not), ``ws`` (the worker's workspace path)."""

    root: Path

    @property
    def base(self) -> Path:
        return self.root / "base"

    @property
    def ws(self) -> Path:
        return self.root / "ws"

    @property
    def state(self) -> Path:
        """The state directory its fronts share, as a host's default one."""
        return self.root / "state"

    def mount(self) -> None:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64m", "foldline-test", self.base], check=True
        )
        (self.base / ".template").mkdir()
        (self.base / ".template" / "readme.txt").write_text("from the template\n")
        (self.base / ".template" / ".foldline").mkdir()
        (self.base / ".template" / ".foldline" / "foldline.db").write_text("not to be copied")


@contextlib.contextmanager
def place() -> Iterator[Place]:
    """A fresh root the run user can walk into (pytest's own is root's 0700)."""
    root = Path(tempfile.mkdtemp(prefix="foldline-front-"))
    os.chmod(root, 0o755)
    made = Place(root)
    made.base.mkdir()
    try:
        yield made
    finally:
        for _ in range(5):
            if subprocess.run(["umount", "-l", made.base], capture_output=True).returncode:
                break
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Front:
    process: subprocess.Popen[bytes]
    port: int
    worker_port: int  # from the front's boot line

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        sid: str | None = SID_A,
        headers: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> tuple[int, dict[str, str], bytes]:
        sent = {**({HEADER: sid} if sid else {}), **(headers or {})}
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            payload = body if isinstance(body, bytes) or body is None else json.dumps(body)
            conn.request(method, path, body=payload, headers=sent)
            answer = conn.getresponse()
            return answer.status, dict(answer.getheaders()), answer.read()
        finally:
            conn.close()

    def invoke(self, body: Any, sid: str = SID_A) -> tuple[int, Any]:
        status, _, raw = self.request("POST", "/invocations", body, sid=sid)
        return status, json.loads(raw)

    log: Path

    def output(self) -> str:
        """What the front (and its worker) wrote so far."""
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def front(where: Place, env: dict[str, str] | None = None) -> Iterator[Front]:
    """Start a front, wait until its /ping answers, SIGTERM it (then SIGKILL) at the end."""
    port = free_port()
    full_env = {
        "PATH": os.environ["PATH"],
        "FOLDLINE_SESSION_BASE": str(where.base),
        "FOLDLINE_STATE_DIR": str(where.state),
        "FOLDLINE_TOKEN": "test-operator-token",
        "FOLDLINE_WORKERS": "1",
        "FOLDLINE_THREADS": "8",
        "FOLDLINE_SSE_KEEPALIVE_S": "0.3",
        **(env or {}),
    }
    log = where.root / f"front-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "adapters.cli",
                "front",
                "--workspace",
                str(where.ws),
                "--bind",
                f"127.0.0.1:{port}",
            ],
            cwd=ROOT,
            env=full_env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    handle = Front(process, port, 0, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, handle.output()
            with contextlib.suppress(OSError):
                if handle.request("GET", "/ping", sid=None, timeout=2)[0] == 200:
                    break
            assert time.monotonic() < deadline, "front did not answer /ping within 30 s"
            time.sleep(0.05)
        wait_until(lambda: boot_line(handle) is not None, what="the front's boot line")
        said = boot_line(handle)
        assert said is not None
        handle.worker_port = int(said["worker"].split()[0].rpartition(":")[2])
        yield handle
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # a worker left behind, if any


def boot_line(served: Front) -> dict[str, Any] | None:
    """The front's boot line (JSON on stdout), once it is written."""
    for line in served.output().splitlines():
        if line.startswith('{"front"'):
            said: dict[str, Any] = json.loads(line)
            return said
    return None


def established_to(port: int) -> int:
    """Open TCP connections to ``127.0.0.1:port`` in this network namespace (the proxy's)."""
    count = 0
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            remote, state = fields[2], fields[3]
            if state == "01" and int(remote.split(":")[1], 16) == port:
                count += 1
    return count


def wait_until(check: Any, limit: float = 30, what: str = "condition") -> None:
    """Poll ``check`` (a cheap observation) until true, at most ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"{what} not reached within {limit} s"
        time.sleep(0.05)


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (``pgrep -P``)."""
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(child) for child in found.stdout.split()]


def _command_line(pid: int) -> bytes:
    """``pid``'s command line, or nothing once it has exited (a notify hook may, between
    ``pgrep`` and the read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def worker_of(served: Front) -> int:
    """The front's one worker (its notify hooks, also its children, run ``sh``)."""
    workers = [pid for pid in children(served.process.pid) if b"adapters.cli" in _command_line(pid)]
    assert len(workers) == 1, workers
    return workers[0]


def held_hook(then: str = "") -> str:
    """A notify hook that says it started (``$OUT/started``), then waits (at most 30 s) for the
    test's ``$OUT/go`` and runs ``then``."""
    return (
        'cat >/dev/null; touch "$OUT/started"; i=0;'
        ' while [ ! -e "$OUT/go" ] && [ "$i" -lt 600 ]; do sleep 0.05; i=$((i + 1)); done'
        + (f"; {then}" if then else "")
    )
