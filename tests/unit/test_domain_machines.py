"""The five machines against design.md §4.2-§4.5 and §4.8, written out here independently of
the code."""

from __future__ import annotations

import itertools
from collections import deque

import pytest

from engine.domain import JOB, LEASE, PUSH, RESULT, SESSION, TASK
from engine.machines import Machine, build_machine

NEW = None
SESSION_LIVE = [
    "starting",
    "running",
    "detached",
    "paused",
    "suspended",
    "finishing",
    "stopping",
    "cancelling",
]
SESSION_ALL = [*SESSION_LIVE, "completed", "failed", "stopped", "cancelled"]
JOB_LIVE = ["queued", "running", "paused", "suspended", "cancelling", "settling"]
TASK_OPEN = ["submitted", "working", "input-required", "auth-required"]

# event_type -> (sources, destinations); "=" means the state does not change.
SPEC: dict[str, dict[str, tuple[list[str | None], set[str]]]] = {
    "lease": {
        "lease.acquired": ([NEW, "released"], {"held"}),
        "lease.renewed": (["held"], {"="}),
        "lease.taken_over": (["held"], {"="}),
        "lease.new_log": (["held"], {"="}),
        "lease.checkpoint_signed": (["held"], {"="}),
        "lease.released": (["held"], {"released"}),
    },
    "session": {
        "session.created": ([NEW], {"starting"}),
        "session.started": (["starting"], {"running"}),
        "session.detached": (["starting", "running", "paused"], {"detached"}),
        "session.attached": (["detached", "paused", "suspended"], {"running"}),
        "session.paused": (["running", "detached", "suspended"], {"paused"}),
        "session.suspended": (["starting", "running", "detached", "paused"], {"suspended"}),
        "session.resumed": (["detached", "paused", "suspended"], {"starting"}),
        "session.finishing": (
            ["starting", "running", "detached", "paused", "suspended"],
            {"finishing"},
        ),
        "session.finished": (["finishing"], {"completed", "failed", "detached"}),
        # cancel > stop > finish: stopping cannot replace cancelling (nor itself)
        "session.stopping": (
            [s for s in SESSION_LIVE if s not in ("stopping", "cancelling")],
            {"stopping"},
        ),
        "session.stopped": (["stopping"], {"stopped"}),
        "session.cancelling": ([s for s in SESSION_LIVE if s != "cancelling"], {"cancelling"}),
        "session.cancelled": (["cancelling"], {"cancelled"}),
        "session.tainted": (SESSION_ALL, {"="}),
        "session.owes": (SESSION_LIVE, {"="}),
        "session.settled": (SESSION_LIVE, {"="}),
    },
    "job": {
        "job.accepted": ([NEW], {"queued"}),
        "job.started": (["queued", "paused", "suspended"], {"running"}),
        # ADR 0050: an owed job whose run ends with its subtree live settles, and ends when the
        # last live job below it does.
        "job.finished": (["running"], {"ok", "error", "settling"}),
        "job.settled": (["settling"], {"ok", "error"}),
        "job.superseded": (
            ["queued", "running", "paused", "suspended", "settling"],
            {"superseded"},
        ),
        # Not in the design.md §4.4 table: live output chunks, kept in the log so that SSE deltas
        # have positions and survive a reconnect to another worker (ADR 0011).
        "job.output": (["running", "paused", "cancelling"], {"="}),
        # A run's live channel (ADR 0038): a control is sent to a running job only; what
        # reaches the run, and what it says back, is recorded while a process exists.
        "job.control": (["running"], {"="}),
        # ADR 0057: a caller's fork of a live job, and a continue that relaunches a job whose
        # run is gone (its new run's start follows in the same commit), keep its state.
        "job.forked": (JOB_LIVE, {"="}),
        "job.relaunched": (["paused", "suspended"], {"="}),
        "job.control_delivered": (["running", "paused", "cancelling"], {"="}),
        "job.control_lost": (JOB_LIVE, {"="}),
        "job.turn_started": (["running", "paused", "cancelling"], {"="}),
        "job.turn_ended": (["running", "paused", "cancelling"], {"="}),
        "job.input_requested": (["running", "paused", "cancelling"], {"="}),
        "job.progress": (["running", "paused", "cancelling"], {"="}),
        # ADR 0054: what a run answers, while it runs.
        "job.artifact": (["running", "paused", "cancelling"], {"="}),
        "job.answered": (["running", "paused", "cancelling"], {"="}),
        # ADR 0058: a live pause made cold; a cold pause's run retired; a continue refused at
        # re-admission; a graceful stop's SIGTERM, recorded before it is sent.
        "job.paused": (["running", "paused"], {"paused"}),
        "job.retired": (["paused"], {"="}),
        "job.continue_refused": (["paused", "suspended"], {"="}),
        "job.signalled": (["running", "paused", "cancelling"], {"="}),
        "job.continued": (["paused"], {"running"}),
        # Paused too: a paused run whose process died is cut off like a running one (design.md §8).
        "job.suspended": (["running", "paused"], {"suspended"}),
        # Not in the design.md §4.4 table: recovery could not start a cut-off job again (ADR 0017).
        "job.resume_failed": (["suspended"], {"error"}),
        # A settling job has no run to confirm a cancel: it is cancelled at once.
        "job.cancel_requested": ([s for s in JOB_LIVE if s != "settling"], {"cancelling"}),
        "job.cancelled": (
            ["cancelling", "queued", "paused", "suspended", "settling"],
            {"cancelled"},
        ),
        "job.notify_started": (["ok", "error"], {"="}),
        "job.notify_finished": (["ok", "error"], {"="}),
        "job.notify_lost": (["ok", "error"], {"="}),
    },
    "task": {
        "task.created": ([NEW], {"submitted"}),
        "task.status_updated": (TASK_OPEN, {"working"}),
        "task.message_added": (TASK_OPEN, {"working"}),
        "task.input_required": (["submitted", "working"], {"input-required"}),
        "task.auth_required": (["submitted", "working"], {"auth-required"}),
        "task.completed": (TASK_OPEN, {"completed"}),
        "task.failed": (TASK_OPEN, {"failed"}),
        "task.canceled": (TASK_OPEN, {"canceled"}),
        # ADR 0054: a run may refuse its task whatever it waits for.
        "task.rejected": (TASK_OPEN, {"rejected"}),
        "task.artifact_updated": (TASK_OPEN, {"="}),
        # ADR 0039: a caller's webhooks, made on an open task, removed at any time.
        "task.push_config_set": (TASK_OPEN, {"="}),
        "task.push_config_deleted": (
            [*TASK_OPEN, "completed", "failed", "canceled", "rejected"],
            {"="},
        ),
    },
    "result": {
        "result.read": ([NEW], {"read"}),
        "result.accepted": (["read"], {"accepted"}),
        "result.rejected": (["read"], {"rejected"}),
        # Issue 28: integrating is an intent (the trees before and after) confirmed or undone.
        "result.integrating": (["accepted"], {"integrating"}),
        # From accepted: the single step of logs written before the intent existed.
        "result.integrated": (["accepted", "integrating"], {"integrated"}),
        "result.integration_undone": (["integrating"], {"accepted"}),
    },
    # ADR 0039: one owed push notification; every row is tried at least once.
    "push": {
        "push.attempt_started": ([NEW, "waiting", "sending"], {"sending"}),
        "push.delivered": (["sending"], {"delivered"}),
        "push.failed": (["sending"], {"waiting"}),
        "push.dead": (["sending", "waiting"], {"dead"}),
    },
}
TERMINAL = {
    "lease": set(),
    "session": {"completed", "failed", "stopped", "cancelled"},
    "job": {"ok", "error", "superseded", "cancelled"},
    "task": {"completed", "failed", "canceled", "rejected"},
    "result": {"rejected", "integrated"},
    "push": {"delivered", "dead"},
}
BUILT = {spec.kind: build_machine(spec) for spec in (LEASE, SESSION, JOB, TASK, RESULT, PUSH)}


def _pairs() -> list[tuple[str, str | None, str]]:
    return [
        (kind, state, event_type)
        for kind, events in SPEC.items()
        for state, event_type in itertools.product([NEW, *BUILT[kind].spec.states], events)
    ]


@pytest.mark.parametrize(("kind", "state", "event_type"), _pairs())
def test_domain_machine_allows_exactly_what_spec_says(
    kind: str, state: str | None, event_type: str
) -> None:
    sources, dests = SPEC[kind][event_type]
    rules = BUILT[kind].table.get((state, event_type))
    if state not in sources:
        assert rules is None, f"{kind}: {event_type} must be refused from {state}"
        return
    assert rules is not None, f"{kind}: {event_type} must be allowed from {state}"
    got = {rule.dest or "=" for rule in rules}
    assert got == dests


@pytest.mark.parametrize("kind", sorted(SPEC))
def test_domain_machine_declares_spec_states_events_and_terminals(kind: str) -> None:
    machine = BUILT[kind]
    assert set(machine.event_classes) == set(SPEC[kind])
    assert set(machine.spec.terminal) == TERMINAL[kind]


def _reachable(machine: Machine) -> set[str]:
    seen = {
        dest
        for (src, _), rules in machine.table.items()
        if src is None
        for dest in (r.dest for r in rules)
        if dest
    }
    frontier = deque(seen)
    while frontier:
        state = frontier.popleft()
        for (src, _), rules in machine.table.items():
            for rule in rules:
                if src == state and rule.dest and rule.dest not in seen:
                    seen.add(rule.dest)
                    frontier.append(rule.dest)
    return seen


@pytest.mark.parametrize("kind", sorted(SPEC))
def test_domain_machine_every_state_reachable_and_live_states_have_a_way_out(kind: str) -> None:
    machine = BUILT[kind]
    assert _reachable(machine) == set(machine.spec.states)
    for state in machine.spec.states:
        if state in machine.spec.terminal:
            continue
        exits = {r.dest for (s, _), rules in machine.table.items() if s == state for r in rules}
        assert exits - {None, state}, f"{kind}: {state} has no way out"
