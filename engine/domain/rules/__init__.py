"""The domain rules: how each command becomes events (design.md §4.2-§4.7), one module per
aggregate (``lease``, ``session``, ``job``, ``task``, ``result``, a run's ``channel``,
``push`` notifications, a job's ``pause``, a caller's ``controls``) and one
per shared policy (``pointer``, ``admission``, ``lineage``, ``roles``).

Every rule reads the current rows through ``ctx.view`` and appends through ``ctx.append``,
both bound to one write transaction: a later read in the same command sees the earlier appends
(that is how a batch is admitted cumulatively), and any error rolls the whole command back.
Rules never do IO of their own and never read the clock except through ``ctx.now``.

``decide`` applies a command's rule, then the quiet gate (``quiet``, ADR 0050), which is a
consequence of whatever command ended a job rather than a rule of its own.
"""

from __future__ import annotations

# Importing the aggregates' modules registers their rules.
from engine.domain.commands import Command
from engine.domain.rules import (
    channel,
    controls,
    job,
    lease,
    pause,
    push,
    quiet,
    refusals,
    registry,
    result,
    session,
    task,
)
from engine.domain.rules.registry import RULES, Context, Settings, rule


def decide(command: Command, ctx: Context) -> None:
    """Apply the rules of ``command``, then end the settling jobs it left quiet (ADR 0050).

    Raises:
        EngineError: the rules refused the command (nothing is appended).
    """
    registry.decide(command, ctx)
    quiet.complete_quiet_ancestors(ctx)


__all__ = [
    "RULES",
    "Context",
    "Settings",
    "channel",
    "controls",
    "decide",
    "job",
    "lease",
    "pause",
    "push",
    "refusals",
    "result",
    "rule",
    "session",
    "task",
]
