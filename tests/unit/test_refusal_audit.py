"""Which refused requests are audited and how a burst is coalesced (ADR 0065): a fork, a pause
and a channel control are controls like a cancel; identical refusals within the window are one
``audit.refused`` and one count."""

from __future__ import annotations

import msgspec

from adapters.http.refusals import CONTROL, INTEGRATE, SPAWN, action_of, control_of
from adapters.services.refusals import RefusalRecorder
from engine.domain.refusals import RecordRefusal
from tests.support.front import wait_until

JOB_ACTION = "/v1/jobs/{job_id}/{action}"


def test_refusal_action_of_names_every_refusable_route() -> None:
    cases = [
        ("/v1/jobs", {}, SPAWN, ""),
        (JOB_ACTION, {"job_id": "j", "action": "fork"}, CONTROL, "fork"),
        (JOB_ACTION, {"job_id": "j", "action": "pause"}, CONTROL, "pause"),
        ("/v1/jobs/{job_id}/steer", {"job_id": "j"}, CONTROL, "steer"),
        (
            "/v1/sessions/{session_id}/{action}",
            {"session_id": "s", "action": "stop"},
            CONTROL,
            "stop",
        ),
        (
            "/v1/jobs/{job_id}/result/{disposition}",
            {"job_id": "j", "disposition": "accept"},
            CONTROL,
            "accept",
        ),
        (
            "/v1/jobs/{job_id}/result/{disposition}",
            {"job_id": "j", "disposition": "integrated"},
            INTEGRATE,
            "integrated",
        ),
    ]
    for template, params, action, control in cases:
        assert action_of(template, params) == action, template
        assert control_of(template, params, action) == control, template
    assert action_of("/v1/jobs/wait", {}) is None  # a read, never audited


def test_refusal_recorder_coalesces_a_burst_into_one_count() -> None:
    written: list[RecordRefusal] = []
    recorder = RefusalRecorder(written.append, window_s=0.3)
    refusal = RecordRefusal(
        session_id="s1",
        action=CONTROL,
        control="fork",
        code="not_granted",
        caller="job_a",
        target="job_b",
    )
    for _ in range(5):
        recorder.record(refusal)
    assert [r.count for r in written] == [0]  # the first at once, the rest counted
    wait_until(lambda: len(written) == 2, 10, "the window's count")
    assert written[1].count == 4 and written[1].code == "not_granted"
    recorder.record(msgspec.structs.replace(refusal, code="stale_revision"))
    assert [r.code for r in written[2:]] == ["stale_revision"]  # another key: its own first
