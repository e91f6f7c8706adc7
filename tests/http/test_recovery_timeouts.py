"""design.md §4.3's session timeouts, recorded by the lease holder for sessions with a controller.

The runtime's clock is injected: the graces are crossed by moving it, not by sleeping.
"""

from __future__ import annotations

from adapters.services import recovery
from adapters.services.runtime import Runtime
from engine.clock import FixedClock
from engine.domain import commands as c
from tests.http.conftest import MakeClient, sql


def _state(runtime: Runtime, session_id: str) -> str:
    return str(sql(runtime, "SELECT state FROM sessions WHERE session_id = ?", session_id)[0][0])


def test_recovery_times_out_sessions_whose_controller_never_came_or_went(
    make_client: MakeClient,
) -> None:
    clock = FixedClock()
    _, runtime = make_client(clock=clock, start_grace_s=60, transition_grace_s=120)
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
    clock.advance(60)  # exactly at the start grace: not past it
    recovery.record_timeouts(engine, runtime.graces)
    assert [_state(runtime, s) for s in ("never", "lost", "closing")] == [
        "starting",
        "starting",
        "stopping",
    ]
    clock.advance(1)  # past the start grace, within the transition grace
    recovery.record_timeouts(engine, runtime.graces)
    assert [_state(runtime, s) for s in ("never", "lost", "closing")] == [
        "failed",
        "suspended",
        "stopping",
    ]
    clock.advance(60)  # past the transition grace too
    recovery.record_timeouts(engine, runtime.graces)
    assert [_state(runtime, s) for s in ("never", "lost", "closing", "plain")] == [
        "failed",
        "suspended",
        "stopped",
        "running",
    ]
