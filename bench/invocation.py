"""``ratio.invocation_vs_floor``: sync ``POST /invocations`` round trips against the floor of
what one must cost, measured by hand in the same run, plus latency under 16 clients.

A sync invocation spawns the runner (as the run user, its mount namespace hiding the log, when
the server is root: ADR 0029), records the job (accepted, started, finished: three
durable commits at least) and answers once the job has left ``running``. Its floor is built from
the same parts with nothing of foldline in between: one run of the runner command exactly as
the runtime starts it (``adapters.system.processes.spawn_gated``: ``sh -c`` behind its start
gate, the prompt on stdin, output read to the end), three raw durable APSW appends, and two
trivial GETs (``/ping``) on the same server for the HTTP round trips. One client measures
the round trip; then 16 clients measure latency percentiles and throughput.
"""

from __future__ import annotations

import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import apsw

from adapters.services import sandbox
from adapters.services.sandbox import Sandbox
from adapters.settings.config import load_config
from adapters.system.processes import spawn_gated
from bench.http_load import THREADS, WORKERS, free_port, server

RUNNER = "cat"


def serve_command(workspace: str, port: int, workers: int = WORKERS) -> list[str]:
    return [
        sys.executable,
        "-m",
        "adapters.cli",
        "serve",
        "--workspace",
        workspace,
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--threads",
        str(THREADS),
    ]


def invoke(conn: http.client.HTTPConnection) -> None:
    conn.request("POST", "/invocations", body=b'{"prompt": "bench"}')
    answer = conn.getresponse()
    body = json.loads(answer.read())
    if answer.status != 200 or body.get("status") != "ok":
        raise RuntimeError(f"sync invocation failed: {answer.status} {body}")


def _ping(conn: http.client.HTTPConnection) -> None:
    conn.request("GET", "/ping")
    answer = conn.getresponse()
    answer.read()
    if answer.status != 200:
        raise RuntimeError(f"/ping answered {answer.status}")


class RawAppends:
    """Durable appends by raw APSW (BEGIN IMMEDIATE, version check, INSERT, COMMIT)."""

    def __init__(self, path: Path) -> None:
        self.conn = apsw.Connection(str(path))
        self.conn.set_busy_timeout(10_000)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute(
            "CREATE TABLE events (position INTEGER PRIMARY KEY, stream_id TEXT, version INTEGER,"
            " payload BLOB, UNIQUE (stream_id, version))"
        )
        self.count = 0

    def append(self) -> None:
        self.count += 1
        stream = f"job:{self.count // 3}"
        self.conn.execute("BEGIN IMMEDIATE")
        head = self.conn.execute(
            "SELECT coalesce(max(version), 0) FROM events WHERE stream_id = ?", (stream,)
        ).fetchall()[0][0]
        self.conn.execute(
            "INSERT INTO events VALUES (NULL, ?, ?, ?)", (stream, head + 1, b'{"prompt":"bench"}')
        )
        self.conn.execute("COMMIT")


def run_runner(workspace: Path, jail: Sandbox | None = None) -> None:
    """One run of the runner command exactly as the runtime starts it: ``sh -c`` behind its
    start gate (ADR 0011), as the run user with the log's directory hidden when the server
    is root (ADR 0029), the prompt on stdin, stdout and stderr read to the end."""
    env = jail.env() if jail else {}
    process = spawn_gated(RUNNER, workspace, env, wrap=jail.wrap if jail else None)
    process.open_gate(b"bench")
    child = process.process
    assert child.stdout is not None and child.stderr is not None
    out = child.stdout.read()  # the runner writes next to nothing on stderr
    child.stderr.read()
    code = child.wait(timeout=60)
    child.stdout.close()
    child.stderr.close()
    if code != 0 or out != b"bench":
        raise RuntimeError(f"the runner failed: {code} {out!r}")


def _timed(operation: object, repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        operation()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _concurrent(port: int, clients: int, seconds: float) -> tuple[list[float], float]:
    """Latencies of sync invocations by ``clients`` threads for ``seconds``, and the rate."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop_at = time.monotonic() + seconds

    def client(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            invoke(conn)
            latencies[index].append(time.perf_counter() - started)
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 120)
    elapsed = time.monotonic() - started
    every = [latency for mine in latencies for latency in mine]
    return every, len(every) / elapsed


def bench_invocation(seconds: float, clients: int = 16, rounds: int = 20) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="foldline-invocation-bench-") as folder:
        port = free_port()
        raw = RawAppends(Path(folder) / "raw.db")
        workspace = Path(folder) / "workspace"
        workspace.mkdir()
        state = Path(folder) / "state"
        env = {"FOLDLINE_RUNNER": RUNNER, "FOLDLINE_STATE_DIR": str(state)}
        # What the server does to start a run: as the run user when it is root (ADR 0029).
        jail = sandbox.for_server(load_config(env, workspace=str(workspace)))
        with server(serve_command(str(workspace), port), port, "/ping", env):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            invoke(conn)  # warm up: lease, recovery, first connections, the run user's home
            # Interleaved so that both sides see the same machine.
            ours, floors, plain_spawns, spawns = [], [], [], []
            for _ in range(rounds):
                ours.append(_timed(lambda: invoke(conn), 3))
                spawn = _timed(lambda: run_runner(workspace, jail), 3)
                plain_spawns.append(_timed(lambda: run_runner(workspace), 3))
                spawns.append(spawn)
                appends = _timed(raw.append, 3)
                get = _timed(lambda: _ping(conn), 3)
                floors.append(spawn + 3 * appends + 2 * get)
            conn.close()
            latencies, rate = _concurrent(port, clients, seconds)
        raw.conn.close()
    quantiles = statistics.quantiles(latencies, n=100)
    round_trip, floor = statistics.median(ours), statistics.median(floors)
    plain, spawned = statistics.median(plain_spawns), statistics.median(spawns)
    return {
        "http.run_spawn_plain_ms": plain * 1000,
        "http.run_spawn_ms": spawned * 1000,
        # The price of a run out of the log's reach: 1.0 when runs keep the server's user.
        "ratio.run_plain_vs_isolated": plain / spawned,
        "http.sync_invocation_ms": round_trip * 1000,
        "http.sync_floor_ms": floor * 1000,
        "ratio.invocation_vs_floor": floor / round_trip,
        "http.sync_clients": float(clients),
        "http.sync_p50_ms": quantiles[49] * 1000,
        "http.sync_p99_ms": quantiles[98] * 1000,
        "http.sync_per_s": rate,
    }
