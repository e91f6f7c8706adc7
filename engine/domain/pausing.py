"""The commands that pause a job, record its run lost or retired, and continue it (ADR 0058):
a live pause holds what the job holds, a cold one asks its run to end and releases it once the
run is gone; a run lost to a signal suspends the job; a refused continue is recorded."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from engine.domain.commands import Command, Digest, Id, Short

GRACE_LIMIT_S = 3600  # the longest grace a cold pause or a graceful stop may give (ADR 0058)
Grace = Annotated[int, msgspec.Meta(ge=0, le=GRACE_LIMIT_S)]
# How many controls were recorded on a job: what ``If-Match`` on a control names (ADR 0057).
Revision = Annotated[int, msgspec.Meta(ge=0)]


class PauseJob(Command, tag="PauseJob", frozen=True, kw_only=True):
    """Pause a running job (ADR 0058): ``live`` stops its run's group and keeps its units and
    write scope; ``cold`` asks its run to finalize (a run that takes input; the others get
    SIGTERM) and ends its group after ``grace_s``, releasing them once it is gone. A live
    pause may be made cold. ``caller_job``: an ancestor's live run granted ``pause`` (ADR
    0057), else the operator; ``expected_revision``: the job's control revision it saw."""

    job_id: Id
    mode: Literal["live", "cold"] = "live"
    grace_s: Grace = 30
    caller_job: Id | None = None
    caller_token_digest: Digest | None = None
    expected_revision: Revision | None = None


class ContinueJob(Command, tag="ContinueJob", frozen=True, kw_only=True):
    """Continue a live-paused job: its group goes on, with what it kept. ``caller_job``: an
    ancestor's live run granted ``continue`` (ADR 0057), else the operator;
    ``expected_revision``: the job's control revision it saw (a relaunch is a ``ControlJob``
    with ``relaunch`` and the ``StartJob`` of its new run)."""

    job_id: Id
    caller_job: Id | None = None
    caller_token_digest: Digest | None = None
    expected_revision: Revision | None = None


class SuspendJob(Command, tag="SuspendJob", frozen=True, kw_only=True):
    """The job's run is gone: cut off by a crash (recovery), or lost while the server lived
    (its run's owner; ``run_id`` then names the run that ended, ``exit_code`` its signal)."""

    job_id: Id
    reason: Short = ""
    run_id: Id | None = None
    exit_code: int | None = None


class RetireJob(Command, tag="RetireJob", frozen=True, kw_only=True):
    """A cold-paused job's run ``run_id`` is gone (ADR 0058): it holds nothing until a
    continue relaunches it."""

    job_id: Id
    run_id: Id | None = None
    reason: Short = ""
    exit_code: int | None = None


class SignalJob(Command, tag="SignalJob", frozen=True, kw_only=True):
    """Record a signal the server is about to send to the job's run group (a graceful stop)."""

    job_id: Id
    signal: Literal["SIGTERM"] = "SIGTERM"
    reason: Short = ""


class RefuseContinue(Command, tag="RefuseContinue", frozen=True, kw_only=True):
    """Record that a continue of a job whose run is gone was refused (re-admission: capacity,
    counts, write scope), so the refusal is in the log and not only in an HTTP answer."""

    job_id: Id
    reason: Annotated[str, msgspec.Meta(max_length=1000)]
    by: Short = ""
