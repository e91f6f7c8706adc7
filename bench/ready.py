"""``time_to_ready.<n>``: from ``foldline serve`` starting to its first answered write, on a
log of n events, and the ratio between the largest and the smallest log.

The write is a ``POST /invocations``: it takes the lease and runs recovery (chain tail, run
ledger sweep, resumes) before it is answered, so this is the time to be useful after a restart.
Recovery must not grow with the length of history.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine.domain import MACHINES
from engine.domain.job import JobAccepted, JobFinished, JobStarted
from engine.log import Transaction, open_log
from projections import default_projections

ROOT = Path(__file__).resolve().parents[1]


def build(workspace: Path, n: int, result: str = "done") -> None:
    """A log of ``n`` job events (accepted, started, finished), in large transactions."""
    log = open_log(
        workspace / ".foldline" / "foldline.db", MACHINES, default_projections(), sync="normal"
    )
    per_batch = 3000

    for start in range(0, n, per_batch):

        def work(tx: Transaction, start: int = start) -> None:
            for i in range(start // 3, min(start + per_batch, n) // 3):
                stream = f"job:history{i}"
                tx.append(
                    stream,
                    0,
                    [
                        JobAccepted(session="s"),
                        JobStarted(run_id=f"r{i}"),
                        JobFinished(outcome="ok", result=result),
                    ],
                )

        log.write(work)
    log.close()


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def time_to_ready(workspace: Path) -> float:
    port = _port()
    started = time.perf_counter()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "adapters.cli",
            "serve",
            "--workspace",
            str(workspace),
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
        ],
        cwd=ROOT,
        env={**os.environ, "FOLDLINE_RUNNER": "cat"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while time.perf_counter() - started < 120:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request(
                    "POST", "/invocations", body=json.dumps({"prompt": "ready?", "async": True})
                )
                if conn.getresponse().status == 200:
                    return time.perf_counter() - started
            except OSError:
                time.sleep(0.01)
        raise RuntimeError("the server never answered")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def bench_ready(sizes: tuple[int, ...], runs: int) -> dict[str, float]:
    import statistics

    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="foldline-ready-") as folder:
        for n in sizes:
            workspace = Path(folder) / str(n)
            workspace.mkdir()
            build(workspace, n)
            results[f"time_to_ready.{n}"] = statistics.median(
                time_to_ready(workspace) for _ in range(runs)
            )
    small, large = sizes[0], sizes[-1]
    name = f"ratio.ready_1e{len(str(large)) - 1}_vs_1e{len(str(small)) - 1}"
    results[name] = results[f"time_to_ready.{large}"] / results[f"time_to_ready.{small}"]
    return results
