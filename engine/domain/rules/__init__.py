"""The domain rules: how each command becomes events (design.md §4.2-§4.7), one module per
aggregate (``lease``, ``session``, ``job``, ``task``, ``result``, a run's ``channel``,
``push`` notifications) and one
per shared policy (``pointer``, ``admission``, ``lineage``, ``roles``).

Every rule reads the current rows through ``ctx.view`` and appends through ``ctx.append``,
both bound to one write transaction: a later read in the same command sees the earlier appends
(that is how a batch is admitted cumulatively), and any error rolls the whole command back.
Rules never do IO of their own and never read the clock except through ``ctx.now``.
"""

from __future__ import annotations

# Importing the aggregates' modules registers their rules.
from engine.domain.rules import channel, job, lease, push, result, session, task
from engine.domain.rules.registry import RULES, Context, Settings, decide, rule

__all__ = [
    "RULES",
    "Context",
    "Settings",
    "channel",
    "decide",
    "job",
    "lease",
    "push",
    "result",
    "rule",
    "session",
    "task",
]
