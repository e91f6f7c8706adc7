"""kill -9 of a server while a job that covers a superseded one runs (ADR 0048): the next
server resumes it with the same stdin, its covered prompts first, rebuilt from the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.test_server_recovery import ENV, kill_everything
from tests.http.test_session_holds import AGENT, _wait_running
from tests.support.agents import python_agent
from tests.support.channel import wait_for
from tests.support.server import poll_invocation, serve

pytestmark = [pytest.mark.crash, pytest.mark.server]


def test_resume_after_sigkill_gives_the_covering_run_every_prompt_again(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "agent.py").write_text(AGENT)
    env = {**ENV, "FOLDLINE_RUNNER": python_agent("agent.py -")}
    with serve(workspace, env) as first:
        first.invoke({"prompt": "hold 1", "session": "s1", "id": "k1", "async": True})
        first_id = _wait_running(first, "k1")
        _, receipt = first.invoke({"prompt": "hold 2", "session": "s1", "id": "k2", "async": True})
        wait_for(first, receipt["invocation"], "job.output")
        with serve(workspace, env) as second:
            kill_everything(first)
            body = poll_invocation(second, "k2", "ok", limit=60)
            superseded = second.invoke({"get": "k1"})[1]

    # The resumed run got both prompts again; the job's result is its whole output (ADR
    # 0049): what the cut-off run printed, then the resumed run's.
    assert body["result"] == "- saw hold 1 | hold 2\n" * 2
    assert body["covers"] == [first_id]
    assert superseded["status"] == "superseded"
    assert superseded["supersededBy"] == receipt["invocation"]
