"""Agents (roles) as the rules see them: what each may spawn and how many of it may be active
(design.md §4.7). The adapter builds these from ``FOLDLINE_AGENTS_FILE``; the name ``""``
is the default agent (``FOLDLINE_RUNNER``), which has no limits and spawns only its like."""

from __future__ import annotations

from enum import StrEnum

import msgspec


class Mode(StrEnum):
    READ_ONLY = "read-only"
    WORKSPACE_WRITE = "workspace-write"


class AgentPolicy(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    mode: Mode = Mode.READ_ONLY
    resource_group: str | None = None
    units: int = 1
    max_active: int | None = None  # capacity-holding jobs of this agent, across sessions
    can_spawn: tuple[str, ...] = ()
    max_children: int | None = None  # capacity-holding children of one job of this agent
    reject_ancestor_role: bool = False  # refuse a job of this agent below one of its own


DEFAULT_AGENT = AgentPolicy(name="", mode=Mode.WORKSPACE_WRITE, can_spawn=("",))
