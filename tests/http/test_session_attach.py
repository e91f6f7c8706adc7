"""design.md §4.3: a session is attached only while its recorded controller is alive."""

from __future__ import annotations

import subprocess

from adapters.system.processes import start_token
from engine.domain import commands as c
from tests.http.conftest import MakeClient, sql


def test_session_attach_needs_a_live_controller_else_409(make_client: MakeClient) -> None:
    client, runtime = make_client()
    runtime.ensure_lease()
    controller = subprocess.Popen(["sleep", "60"])  # a real controller process
    try:
        engine = runtime.engine
        engine.handle(c.CreateSession(session_id="root", has_controller=True))
        engine.handle(
            c.StartSession(
                session_id="root",
                run_id="r1",
                pid=controller.pid,
                start_token=start_token(controller.pid),
            )
        )
        engine.handle(c.DetachSession(session_id="root", by="operator"))
        answer = client.simulate_post("/v1/sessions/root/continue")
        assert (answer.status_code, answer.json["state"]) == (200, "running")

        engine.handle(c.DetachSession(session_id="root", by="operator"))
        controller.kill()
        controller.wait(timeout=10)
        version = sql(runtime, "SELECT version FROM sessions WHERE session_id = 'root'")
        answer = client.simulate_post("/v1/sessions/root/continue")
        assert answer.status_code == 409
        assert answer.json["error"]["code"] == "controller_gone"
        assert "controller" in answer.json["error"]["message"]
        assert "Traceback" not in answer.text
        # refused: nothing was appended
        assert sql(runtime, "SELECT version FROM sessions WHERE session_id = 'root'") == version
    finally:
        controller.kill()
        controller.wait(timeout=10)


def test_session_attach_of_a_session_without_a_controller_is_not_checked(
    make_client: MakeClient,
) -> None:
    client, runtime = make_client()
    runtime.ensure_lease()
    runtime.engine.handle(c.CreateSession(session_id="plain", start_run_id="r1"))
    runtime.engine.handle(c.DetachSession(session_id="plain", by="operator"))
    answer = client.simulate_post("/v1/sessions/plain/continue")
    assert (answer.status_code, answer.json["state"]) == (200, "running")
