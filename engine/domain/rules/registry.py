"""What every rule shares: the settings, the context type, and the table of rules by command.

A rule is registered with ``@rule(CommandClass)`` next to the code that implements it; ``decide``
finds it by the command's class. ``engine.domain.rules`` imports every aggregate's module, and a
test checks that each command class has exactly one rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engine.domain.agents import DEFAULT_AGENT, AgentPolicy
from engine.domain.commands import Command
from engine.domain.rows import DomainView
from engine.engine import Context as EngineContext
from engine.errors import InvalidArgument, InvalidDeclaration


@dataclass(frozen=True)
class Settings:
    """Configuration the rules need (design.md §4.7, §11)."""

    resource_groups: Mapping[str, int] = field(default_factory=dict)
    lease_stale_s: float = 45.0
    max_depth: int = 8
    # Agents (roles) by name; "" is the default agent, always known (engine.domain.agents).
    agents: Mapping[str, AgentPolicy] = field(default_factory=dict)
    max_active_agents: int | None = None  # capacity-holding jobs per session
    max_active_writers: int | None = None  # capacity-holding jobs with a write scope, per session

    def agent(self, name: str) -> AgentPolicy:
        """The policy of agent ``name``; an unknown name is a 400 (InvalidArgument)."""
        if name == "" and "" not in self.agents:
            return DEFAULT_AGENT
        policy = self.agents.get(name)
        if policy is None:
            known = ", ".join(sorted(n for n in self.agents if n)) or "none configured"
            raise InvalidArgument(f"unknown agent {name!r} (known: {known})", agent=name)
        return policy


Context = EngineContext[DomainView, Settings]
"""What every rule gets: the view, appends, the time and the settings of one command."""

Rule = Callable[[Any, Context], None]
R = TypeVar("R", bound=Rule)

RULES: dict[type[Command], Rule] = {}


def rule(command: type[Command]) -> Callable[[R], R]:
    """Register the decorated function as the rule of ``command``."""

    def register(function: R) -> R:
        if command in RULES:
            raise InvalidDeclaration(f"{command.__name__} has two rules")
        RULES[command] = function
        return function

    return register


def decide(command: Command, ctx: Context) -> None:
    """Apply the rules of ``command``; raises an ``EngineError`` to refuse it."""
    handler = RULES.get(type(command))
    if handler is None:
        raise InvalidArgument(f"unknown command {type(command).__name__}")
    handler(command, ctx)
