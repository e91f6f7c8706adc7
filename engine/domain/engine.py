"""The built-in domain's command API: the generic ``Engine`` wired to the domain rules.

``handle(command)`` takes the commands of ``engine.domain.commands``; the rules read the
domain's read models through a ``DomainView`` (``projections.view`` implements it in SQL).
"""

from __future__ import annotations

from engine.domain import rules
from engine.domain.commands import Command
from engine.domain.rows import DomainView
from engine.engine import Engine, ViewFactory
from engine.log import Log

DomainEngine = Engine[Command, DomainView, rules.Settings]
"""The engine of the built-in domain."""


def domain_engine(
    log: Log, view: ViewFactory[DomainView], settings: rules.Settings | None = None
) -> DomainEngine:
    """The command API over ``log`` (opened with the domain machines and read models)."""
    return Engine(log, rules.decide, view, settings or rules.Settings(), accepts=Command)


__all__ = ["DomainEngine", "domain_engine"]
