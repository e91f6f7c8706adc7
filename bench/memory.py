"""``serve.rss_mb.<n>``: the resident memory of a server worker after it opened a log of n
events and served 100 requests, and the ratio between the largest and the smallest log.

Memory must not grow with history: the log keeps bounded caches (SQLite's page cache per
connection, the writer's stream heads), never the events. The requests mix sync invocations
(lease, recovery, three commits each), ``/ping`` and two ``/v1`` reads.
"""

from __future__ import annotations

import http.client
import tempfile
from pathlib import Path

from bench.http_load import free_port, server
from bench.invocation import RUNNER, invoke, serve_command
from bench.ready import build

REQUESTS = 100
TOKEN = "bench-operator-token"  # the /v1 reads are the operator's
OPERATOR = {"Authorization": f"Bearer {TOKEN}"}


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone while we looked
        # The command name may hold spaces: the parent pid is the 2nd field after the ")".
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _serve_requests(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    reads = ("/ping", "/v1/jobs?limit=50", "/v1/events?after=0&limit=100")
    for i in range(REQUESTS):
        if i % 4 == 0:
            invoke(conn)
            continue
        conn.request("GET", reads[i % 4 - 1], headers=OPERATOR)
        answer = conn.getresponse()
        answer.read()
        if answer.status != 200:
            raise RuntimeError(f"{reads[i % 4 - 1]} answered {answer.status}")
    conn.close()


def worker_rss_mb(workspace: Path) -> float:
    port = free_port()
    command = serve_command(str(workspace), port, workers=1)
    with server(
        command, port, "/ping", {"FOLDLINE_RUNNER": RUNNER, "FOLDLINE_TOKEN": TOKEN}
    ) as master:
        _serve_requests(port)
        workers = _children(master.pid)
        if len(workers) != 1:
            raise RuntimeError(f"expected one worker under {master.pid}, found {workers}")
        return _rss_mb(workers[0])


def bench_memory(sizes: tuple[int, ...]) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="foldline-memory-") as folder:
        for n in sizes:
            workspace = Path(folder) / str(n)
            workspace.mkdir()
            build(workspace, n)
            results[f"serve.rss_mb.{n}"] = worker_rss_mb(workspace)
    small, large = sizes[0], sizes[-1]
    name = f"ratio.rss_1e{len(str(large)) - 1}_vs_1e{len(str(small)) - 1}"
    results[name] = results[f"serve.rss_mb.{large}"] / results[f"serve.rss_mb.{small}"]
    return results
