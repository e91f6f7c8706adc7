"""A resume continues (ADR 0049): the source system's scenario. An agent that performs six slow
steps and prints each as it finishes is killed with its server after two; the next server
resumes it with the output its first run recorded (``FOLDLINE_EARLIER_OUTPUT``); the resumed
run skips the two, does the other four, and the job's result holds all six, each done once."""

from __future__ import annotations

import time
from pathlib import Path

import apsw
import pytest

from tests.crash.test_server_recovery import ENV, kill_everything
from tests.support.agents import python_agent, workspace_with_agents
from tests.support.server import poll_invocation, serve

pytestmark = [pytest.mark.crash, pytest.mark.server, pytest.mark.slow]

# Each step's side effect (a line in steps.log) comes before its checkpoint line on stdout, so
# a step is in the side file at most once per run that did it: six lines, six steps, once each.
STEPPER = """
import os, sys, time
sys.stdin.read()
run = os.environ["FOLDLINE_RUN_ID"]
done = []
earlier = os.environ.get("FOLDLINE_EARLIER_OUTPUT")
if earlier:
    done = [line.split()[1] for line in open(earlier) if line.startswith("step ")]
with open("steps.log", "a") as side:
    side.write(f"{run} saw {','.join(done) or '-'}\\n")
for n in range(1, 7):
    if str(n) in done:
        continue
    time.sleep(2)
    with open("steps.log", "a") as side:
        side.write(f"{run} did {n}\\n")
    print(f"step {n} done", flush=True)
"""


def _recorded_output(workspace: Path, job_id: str) -> str:
    db = apsw.Connection(str(workspace / ".foldline" / "foldline.db"))
    try:
        rows = db.execute(
            "SELECT payload FROM events WHERE stream_id = ? AND event_type = 'job.output'"
            " ORDER BY version",
            (f"job:{job_id}",),
        ).fetchall()
    finally:
        db.close()
    return "".join(bytes(r[0]).decode(errors="replace") for r in rows)


def _kinds(workspace: Path, job_id: str) -> list[str]:
    db = apsw.Connection(str(workspace / ".foldline" / "foldline.db"))
    try:
        sql = "SELECT event_type FROM events WHERE stream_id = ? ORDER BY version"
        return [r[0] for r in db.execute(sql, (f"job:{job_id}",))]
    finally:
        db.close()


def _until_steps_recorded(workspace: Path, job_id: str, count: int, limit: float = 60) -> None:
    """Until the log holds ``count`` step lines of the job's output (bounded in time)."""
    deadline = time.monotonic() + limit
    while _recorded_output(workspace, job_id).count("done") < count:
        assert time.monotonic() < deadline, f"{job_id} never recorded {count} steps"
        time.sleep(0.05)


def test_a_resumed_run_skips_the_steps_its_first_run_printed_and_the_result_holds_all_six(
    tmp_path: Path,
) -> None:
    workspace, agents = workspace_with_agents(
        tmp_path, {"stepper.py": STEPPER}, {"stepper": python_agent("stepper.py")}
    )
    env = {**ENV, "FOLDLINE_AGENTS_FILE": str(agents)}
    body = {"prompt": "six steps", "agent": "stepper", "id": "six", "async": True}
    with serve(workspace, env) as first:
        status, receipt = first.invoke(body)
        assert status in (200, 202), receipt
        job_id = receipt["invocation"]
        _until_steps_recorded(workspace, job_id, 2)
        kill_everything(first)  # step 3 is two seconds away
    with serve(workspace, env) as second:
        done = poll_invocation(second, "six", "ok", limit=120)
    steps = [line for line in done["result"].splitlines() if line.startswith("step ")]
    print(done["result"], end="")  # the closing note quotes the result and the side file
    side = (workspace / "steps.log").read_text()
    print(side, end="")
    assert steps == [f"step {n} done" for n in range(1, 7)]
    runs = [line.split()[0] for line in side.splitlines()]
    first_run, second_run = dict.fromkeys(runs)  # two runs, in order
    assert side.splitlines() == [
        f"{first_run} saw -",
        f"{first_run} did 1",
        f"{first_run} did 2",
        f"{second_run} saw 1,2",
        *(f"{second_run} did {n}" for n in range(3, 7)),
    ]
    kinds = _kinds(workspace, job_id)
    print(" ".join(k for k in kinds if k != "job.output"))
    assert kinds.count("job.started") == 2 and kinds.count("job.finished") == 1
