"""Agents (roles) at admission (design.md §5.5, §4.7): who may spawn whom, and how many of
each may be active, per parent, per agent across sessions and per session. Every count is read
inside the write transaction, so a batch sees what its earlier items took and concurrent
spawns cannot both take the last place. And who may control a job (ADR 0057): the operator,
or a live run of an ancestor whose agent was granted that control on the job's agent."""

from __future__ import annotations

from engine.domain import commands as c
from engine.domain.agents import AgentPolicy, Mode
from engine.domain.errors import AdmissionRejected, Forbidden, NotGranted, Unauthorized
from engine.domain.job import JobState as J
from engine.domain.rows import JobRow
from engine.domain.rules import lookups
from engine.domain.rules.registry import Context
from engine.errors import InvalidArgument


def live_caller(ctx: Context, job_id: str, token_digest: str) -> JobRow:
    """The job whose *current* run holds the token with this digest, while that run is live."""
    caller = ctx.view.job(job_id)
    if caller is None or caller.token_digest != token_digest or caller.state != J.RUNNING:
        raise Unauthorized("the run token does not belong to a live run", job_id=job_id)
    return caller


def caller_name(
    ctx: Context,
    caller_job: str | None,
    token_digest: str | None,
    job: JobRow,
    *,
    ancestor: bool,
) -> str:
    """``operator`` (no calling job), or the id of the live calling job, which must be in
    ``job``'s session and, with ``ancestor``, above it in its lineage."""
    if caller_job is None:
        return "operator"
    caller = live_caller(ctx, caller_job, token_digest or "")
    if caller.session_id != job.session_id:
        raise Forbidden(f"job {job.job_id} is in another session", job_id=job.job_id)
    if ancestor and caller.job_id not in {row.job_id for row in ancestors(ctx, job)}:
        raise Forbidden(
            f"job {caller.job_id} is not an ancestor of {job.job_id}", job_id=job.job_id
        )
    return caller.job_id


def controller(
    ctx: Context, caller_job: str | None, token_digest: str | None, job: JobRow, control: str
) -> str:
    """Who may use ``control`` on ``job``: ``operator`` (no calling job; it keeps every
    control), or the id of a live run of an ancestor in the job's session whose agent grants
    ``control`` on the job's agent (``AgentPolicy.grants``). Generic over the control's name:
    a new control is covered by naming it.

    Raises:
        Unauthorized: the token is not the calling job's live run.
        Forbidden: the caller is in another session or not an ancestor of ``job``.
        NotGranted: the caller's agent lacks the grant (the message names it).
    """
    by = caller_name(ctx, caller_job, token_digest, job, ancestor=True)
    if caller_job is None:
        return by
    agent = lookups.job(ctx, caller_job).agent
    if control not in ctx.settings.agent(agent).grants(job.agent):
        raise NotGranted(
            f"agent {agent or 'default'!r} has no {control!r} grant on agent"
            f" {job.agent or 'default'!r} (controls of its agents-file entry)",
            grant=control,
            agent=agent,
            target_agent=job.agent,
            job_id=job.job_id,
        )
    return by


def ancestors(ctx: Context, job: JobRow) -> list[JobRow]:
    """Parent first, then its parent, up to the top (bounded by the depth limit)."""
    chain: list[JobRow] = []
    parent = job.parent_job
    while parent is not None and len(chain) <= ctx.settings.max_depth:
        row = lookups.job(ctx, parent)
        chain.append(row)
        parent = row.parent_job
    return chain


def _limit(used: int, limit: int | None, reason: str, message: str, **fields: object) -> None:
    if limit is not None and used + 1 > limit:
        raise AdmissionRejected(
            f"{message}: {used}/{limit} active", reason=reason, used=used, limit=limit, **fields
        )


def check_shape(policy: AgentPolicy, cmd: c.AcceptJob) -> None:
    """A read-only agent takes no write scope; a writer needs one. The default agent (``""``,
    FOLDLINE_RUNNER) keeps its old freedom."""
    if not policy.name:
        return
    if policy.mode == Mode.READ_ONLY and cmd.write_scope:
        raise InvalidArgument(f"agent {policy.name!r} is read-only: it takes no write_scope")
    if policy.mode == Mode.WORKSPACE_WRITE and not cmd.write_scope:
        raise InvalidArgument(f"agent {policy.name!r} is workspace-write: it needs a write_scope")


def check_spawn(
    ctx: Context, cmd: c.AcceptJob, parent: JobRow | None, forked: bool = False
) -> None:
    """Every role limit for one new job of ``cmd.agent`` below ``parent`` (None: top level);
    a fork's (``forked``) without ``can_spawn`` and the ancestor rule (ADR 0057)."""
    settings = ctx.settings
    policy = settings.agent(cmd.agent)
    check_shape(policy, cmd)
    if parent is not None:
        if cmd.caller_token_digest is not None:
            live_caller(ctx, parent.job_id, cmd.caller_token_digest)
        spawner = settings.agent(parent.agent)
        # A fork (ADR 0057) is admitted by its caller's fork grant, checked by its rule,
        # and repeats its source's agent by design: neither can_spawn nor the ancestor rule.
        spawned = not forked
        if spawned and cmd.agent not in spawner.can_spawn:
            raise Forbidden(
                f"agent {parent.agent or 'default'!r} cannot spawn {cmd.agent or 'default'!r}",
                agent=cmd.agent,
                parent_agent=parent.agent,
            )
        if (
            spawned
            and policy.reject_ancestor_role
            and cmd.agent in {row.agent for row in [parent, *ancestors(ctx, parent)]}
        ):
            raise AdmissionRejected(
                f"agent {cmd.agent!r} already appears among the ancestors",
                reason="ancestor_role",
                agent=cmd.agent,
            )
    check_counts(ctx, cmd.agent, cmd.session_id, parent, bool(cmd.write_scope))


def check_counts(
    ctx: Context, agent: str, session_id: str, parent: JobRow | None, writer: bool
) -> None:
    """The counted limits for one more capacity-holding job: its parent's ``max_children``,
    the agent's ``max_active`` (all sessions), the session's ``max_active_agents`` and, for a
    writer, ``max_active_writers``. Spawning and re-admission (continue) both go through it."""
    settings = ctx.settings
    policy = settings.agent(agent)
    if parent is not None:
        _limit(
            ctx.view.jobs_holding(parent_job=parent.job_id),
            settings.agent(parent.agent).max_children,
            "max_children",
            f"job {parent.job_id} has its maximum of children",
            parent_job=parent.job_id,
        )
    _limit(
        ctx.view.jobs_holding(agent=agent),
        policy.max_active,
        "max_active",
        f"agent {agent!r} has its maximum of active jobs",
        agent=agent,
    )
    _limit(
        ctx.view.jobs_holding(session_id=session_id),
        settings.max_active_agents,
        "max_active_agents",
        f"session {session_id} has its maximum of active agents",
        session_id=session_id,
    )
    if writer:
        _limit(
            ctx.view.jobs_holding(session_id=session_id, writers=True),
            settings.max_active_writers,
            "max_active_writers",
            f"session {session_id} has its maximum of active writers",
            session_id=session_id,
        )
