"""What a caller's job control asks of the dispatcher when it starts a run (ADR 0057): who asks
(``Controller``), the request that records a continue which relaunches a job, and the one that
records a fork, each decided in the write that starts the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from engine.domain import commands as c
from engine.domain import controls
from engine.domain.agents import AgentPolicy
from engine.domain.rows import JobRow


@dataclass(frozen=True)
class Controller:
    """Who asks for a control (the operator, or a live run by its token's digest), and the
    job's control revision they saw (``If-Match``); the rules check both."""

    caller_job: str | None = None  # None: the operator
    token_digest: str | None = None
    expected_revision: int | None = None


def relaunch_request(job_id: str, by: Controller | None) -> controls.ControlJob | None:
    """A caller's continue of ``job_id`` whose new run starts in the same write (None: a
    recovery's resume, which no caller asked for)."""
    if by is None:
        return None
    return controls.ControlJob(
        job_id=job_id,
        action="continue",
        relaunch=True,
        caller_job=by.caller_job,
        caller_token_digest=by.token_digest,
        expected_revision=by.expected_revision,
    )


def fork_request(
    source: JobRow, prompt: str, policy: AgentPolicy, by: Controller
) -> Callable[[list[str]], controls.ForkJob]:
    """The request that records a fork of ``source`` with ``prompt`` as its new job, given
    the new job's id: of the source's agent (``policy``), session and write scope, below the
    caller."""
    fork = c.AcceptJob(
        job_id="",
        session_id=source.session_id,
        prompt=prompt,
        agent=source.agent,
        parent_job=by.caller_job,
        resource_group=policy.resource_group,
        units=policy.units,
        write_scope=source.write_scope,
        owed=False,
        caller_token_digest=by.token_digest,
    )

    def admit(job_ids: list[str]) -> controls.ForkJob:
        return controls.ForkJob(
            job_id=source.job_id,
            fork=msgspec.structs.replace(fork, job_id=job_ids[0]),
            caller_job=by.caller_job,
            caller_token_digest=by.token_digest,
            expected_revision=by.expected_revision,
        )

    return admit
