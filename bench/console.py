"""``console.list_ms``: the JSON behind a console list page, server-side, at 10^5 jobs;
``console.assets_kb``: the size of the page's own code (goal: under 100 KB uncompressed).

    python -m bench.console [--jobs N] [--runs N]

The log is real (events appended through the log, projections folded in the same
transaction). Each list request goes through the Falcon app (routing, query, JSON) with
falcon's test client, so no socket time is counted. ``console.list_ms`` is the slowest
filter's median; the baseline, measured in the same process, is the same app answering
``/v1/jobs`` (a primary-key walk), and the ratio is printed beside it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import falcon.testing

from adapters.http.app import create_app
from adapters.http.console import asset_names
from adapters.services.runtime import Runtime
from adapters.settings.config import load_config
from engine.domain import MACHINES
from engine.domain.job import JobAccepted, JobFinished, JobStarted
from engine.log import Transaction, open_log
from projections import default_projections

ROOT = Path(__file__).resolve().parents[1]
# The console's JSON is the operator's (closed by the token since /v1 was): the bench reads it
# as the operator does.
TOKEN = "bench-operator-token"
OPERATOR = {"Authorization": f"Bearer {TOKEN}"}


def build(workspace: Path, jobs: int) -> None:
    """``jobs`` jobs over 1000 sessions and 10 agents: 1 % error, 1 % running, 1 % queued,
    the rest ok; appended in large transactions."""
    log = open_log(
        workspace / ".foldline" / "foldline.db", MACHINES, default_projections(), sync="normal"
    )
    per_batch = 2000
    for start in range(0, jobs, per_batch):

        def work(tx: Transaction, start: int = start) -> None:
            for i in range(start, min(start + per_batch, jobs)):
                accepted = JobAccepted(session=f"s{i % 1000:04}", agent=f"agent{i % 10}")
                events: list[object] = [accepted]
                if i % 100 != 1:
                    events.append(JobStarted(run_id=f"r{i}"))
                if i % 100 not in (1, 2):
                    outcome = "error" if i % 100 == 3 else "ok"
                    events.append(JobFinished(outcome=outcome, result=f"result {i}"))
                tx.append(f"job:job_{i:08x}", 0, events)  # type: ignore[arg-type]

        log.write(work)
    log.close()


def _median_ms(
    client: falcon.testing.TestClient, path: str, params: dict[str, str], n: int
) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        answer = client.simulate_get(path, params=params, headers=OPERATOR)
        times.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200, answer.text
    return statistics.median(times)


def bench_console(jobs: int, runs: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="foldline-console-") as tmp:
        workspace = Path(tmp)
        started = time.perf_counter()
        build(workspace, jobs)
        figures["console.build_s"] = time.perf_counter() - started
        runtime = Runtime(load_config({"FOLDLINE_TOKEN": TOKEN}, workspace=str(workspace)), "bench")
        client = falcon.testing.TestClient(create_app(runtime))
        try:
            first = client.simulate_get(
                "/console/api/lists/jobs", params={"limit": "50"}, headers=OPERATOR
            ).json
            deep = first["next"]
            for _ in range(19):  # the cursor of page 21
                deep = client.simulate_get(
                    "/console/api/lists/jobs",
                    params={"limit": "50", "after": deep},
                    headers=OPERATOR,
                ).json["next"]
            cases = {
                "newest": {},
                "page21": {"after": deep},
                "state_ok": {"state": "ok"},
                "state_error": {"state": "error"},
                "state_queued": {"state": "queued"},
                "session": {"session": "s0042"},
                "agent": {"agent": "agent7"},
                "prefix": {"prefix": "job_0000a"},
                "agent_and_state": {"agent": "agent3", "state": "error"},
                # The worst case: no index helps, every row is walked to find nothing.
                "agent_absent": {"agent": "nobody"},
                "prefix_absent": {"prefix": "nothing"},
                "prefix_wide": {"prefix": "job_"},
            }
            path = "/console/api/lists/jobs"
            for name, params in cases.items():
                figures[f"console.list_ms.{name}"] = _median_ms(
                    client, path, {"limit": "50", **params}, runs
                )
            baseline = _median_ms(client, "/v1/jobs", {"limit": "50"}, runs)
            figures["console.baseline_v1_jobs_ms"] = baseline
            figures["console.overview_ms"] = _median_ms(client, "/console/api/overview", {}, runs)
            figures["console.log_ms"] = _median_ms(
                client, "/console/api/log", {"type": "job.finished", "limit": "100"}, runs
            )
            slowest = max(v for k, v in figures.items() if k.startswith("console.list_ms."))
            figures["console.list_ms"] = slowest
            figures["ratio.console_list_vs_v1_jobs"] = slowest / baseline
        finally:
            runtime.close()
    console = ROOT / "adapters" / "http" / "console_pages"
    figures["console.assets_kb"] = sum((console / n).stat().st_size for n in asset_names()) / 1024
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    print(f"jobs: {args.jobs}, runs: {args.runs} (median per case)")
    for name, value in bench_console(args.jobs, args.runs).items():
        print(f"{name}: {value:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
