"""A real ``foldline console DB`` (gunicorn, read-only) on a free loopback port."""

from __future__ import annotations

import contextlib
import http.client
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.server import ROOT, free_port, stop


def get(port: int, path: str, method: str = "GET") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=b"" if method == "POST" else None)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


@contextlib.contextmanager
def serve_console(db: Path | str) -> Iterator[int]:
    """Start it, wait until the overview answers (at most 30 s), yield the port, stop it."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "adapters.cli", "console", str(db), "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stderr.read().decode()  # type: ignore[union-attr]
            with contextlib.suppress(OSError):
                if get(port, "/console/api/overview")[0] == 200:
                    break
            assert time.monotonic() < deadline, "foldline console did not answer within 30 s"
            time.sleep(0.05)
        yield port
    finally:
        stop(process)
