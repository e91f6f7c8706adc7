"""SPEC §4.3's session timeouts, recorded by the lease holder for sessions with a controller."""

from __future__ import annotations

import time

from adapters import recovery
from engine.domain import commands as c
from tests.http.conftest import MakeClient


def _state(runtime: object, session_id: str) -> str:
    return str(
        runtime.query(  # type: ignore[attr-defined]
            "SELECT state FROM sessions WHERE session_id = ?", session_id
        )[0][0]
    )


def test_recovery_times_out_sessions_whose_controller_never_came_or_went(
    make_client: MakeClient,
) -> None:
    _, runtime = make_client(start_grace_s=0.2, transition_grace_s=0.2)
    runtime.ensure_lease()
    engine = runtime.engine
    engine.handle(c.CreateSession(session_id="never", has_controller=True))
    engine.handle(c.CreateSession(session_id="lost", has_controller=True))
    engine.handle(c.StartSession(session_id="lost", run_id="r1", pid=999_999, start_token="x"))
    engine.handle(c.SuspendSession(session_id="lost", reason="controller lost"))
    engine.handle(c.ResumeSession(session_id="lost", run_id="r2"))  # starting again, no process
    engine.handle(c.CreateSession(session_id="closing", has_controller=True, start_run_id="r3"))
    engine.handle(c.StopSession(session_id="closing", wait=True))
    engine.handle(c.CreateSession(session_id="plain", start_run_id="r4"))  # no controller
    recovery.record_timeouts(runtime)
    assert [_state(runtime, s) for s in ("never", "lost", "closing")] == [
        "starting",
        "starting",
        "stopping",
    ]  # not yet: within the grace
    time.sleep(0.3)
    recovery.record_timeouts(runtime)
    assert [_state(runtime, s) for s in ("never", "lost", "closing", "plain")] == [
        "failed",
        "suspended",
        "stopped",
        "running",
    ]
