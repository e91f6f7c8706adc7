"""An invocation's run planned before it is spawned (ADR 0048): its agent, and its prompts.

It is planned from the committed log: the agent the run runs and the prompts it gets.

A session keeps the agent it was created with, so a run on an existing session runs that agent
whatever its caller names. On a busy session a new prompt supersedes the owed job; when it
folds (``deliver``, the default), its run gets the superseded job's prompts before its own,
and those that job covered, so one completion answers them all. The write checks the plan
again (``SessionMoved``): the caller plans again if it no longer holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.domain.engine import DomainEngine
from engine.domain.rules import pointer


@dataclass(frozen=True)
class InvocationPlan:
    """An invocation's run as planned (``plan_invocation``)."""

    agent: str  # the agent the run runs: its session's, or the one named for a new session
    agent_ignored: str  # the one the caller named, if the session's overrides it
    covers: tuple[str, ...] | None  # None: no fold; else the jobs whose prompts go first


def plan_invocation(
    engine: DomainEngine, session_id: str, agent: str, fold: bool
) -> InvocationPlan:
    """Plan an invocation on ``session_id`` naming ``agent`` (``""``: none): the session's
    agent if it exists (``agent`` is then ``agent_ignored``, unless it names none or the
    same), and with ``fold`` the owed job it supersedes, after the jobs that one covered."""
    view = engine.view_of(engine.log.connection())
    session = view.session(session_id)
    if session is None:
        return InvocationPlan(agent, "", () if fold else None)
    ignored = agent if agent and agent != session.agent else ""
    if not fold:
        return InvocationPlan(session.agent, ignored, None)
    earlier = pointer.superseded_by_next(view, session)
    covers = () if earlier is None else (*earlier.covers, earlier.job_id)
    return InvocationPlan(session.agent, ignored, covers)


def session_agent(engine: DomainEngine, session_id: str) -> str | None:
    """The agent session ``session_id`` runs, as committed (None: no such session yet): what
    an A2A message on an existing context runs, whatever it names."""
    session = engine.view_of(engine.log.connection()).session(session_id)
    return session.agent if session is not None else None


__all__ = ["InvocationPlan", "plan_invocation", "session_agent"]
