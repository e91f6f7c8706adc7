"""A caller's controls of a job (ADR 0057): pause, continue and cancel, and fork, each by the
operator (``caller_job`` None) or by a live run of an ancestor whose agent was granted the
control on the job's agent, each at the job's control revision when ``expected_revision``
(``If-Match``) names one. The job's own ``PauseJob``, ``ContinueJob`` and ``CancelJob`` stay
the server's (a session's pause, recovery, a stop), which no grant guards."""

from __future__ import annotations

from typing import Literal

from engine.domain.commands import AcceptJob, Command, Digest, Id, Short
from engine.domain.pausing import Grace, Revision

ACTIONS = ("pause", "continue", "cancel")


class ControlJob(Command, tag="ControlJob", frozen=True, kw_only=True):
    """``action`` on job ``job_id`` (a cancel reaches its live descendants, as ``CancelJob``;
    a pause is ``mode`` ``live`` or ``cold`` with ``grace_s``, as ``PauseJob``). ``relaunch``:
    a continue of a job whose run is gone (suspended, or a cold pause retired), whose new run
    starts in the same write (``StartJob`` with ``resumed``); this records the control."""

    job_id: Id
    action: Literal["pause", "continue", "cancel"]
    reason: Short = ""
    mode: Literal["live", "cold"] = "live"
    grace_s: Grace = 30
    relaunch: bool = False
    caller_job: Id | None = None
    caller_token_digest: Digest | None = None
    expected_revision: Revision | None = None


class ForkJob(Command, tag="ForkJob", frozen=True, kw_only=True):
    """Fork job ``job_id`` (the source) into the new job ``fork`` describes: of the source's
    session, agent and write scope, its parent the calling job (None for the operator), owed
    to nobody. Admitted like any spawn, but by the ``fork`` grant instead of ``can_spawn``."""

    job_id: Id
    fork: AcceptJob
    caller_job: Id | None = None
    caller_token_digest: Digest | None = None
    expected_revision: Revision | None = None
