"""Agents (roles) as the rules see them: what each may spawn, how many of it may be active
(design.md §4.7), and which controls its runs may use on their descendants (ADR 0057). The
adapter builds these from ``FOLDLINE_AGENTS_FILE``; the name ``""`` is the default agent
(``FOLDLINE_RUNNER``), which has no limits and spawns only its like."""

from __future__ import annotations

from enum import StrEnum

import msgspec


class Mode(StrEnum):
    READ_ONLY = "read-only"
    WORKSPACE_WRITE = "workspace-write"


class Visibility(StrEnum):
    """What a run token of the agent reads (ADR 0065): its own job and its descendants, or
    every job and result of its session."""

    DESCENDANTS = "descendants"
    SESSION = "session"


class Contract(StrEnum):
    """What an invalid final reply does (ADR 0065): recorded only, or the job ends ``error``."""

    WARN = "warn"
    STRICT = "strict"


class AgentPolicy(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    mode: Mode = Mode.READ_ONLY
    resource_group: str | None = None
    units: int = 1
    max_active: int | None = None  # capacity-holding jobs of this agent, across sessions
    can_spawn: tuple[str, ...] = ()
    max_children: int | None = None  # capacity-holding children of one job of this agent
    reject_ancestor_role: bool = False  # refuse a job of this agent below one of its own
    # The controls a live run of this agent may use on a descendant, per the descendant's
    # agent (``"*"``: any agent, ``""``: the default one); None: ``DEFAULT_GRANTS`` on every
    # descendant (ADR 0057).
    controls: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    result_visibility: Visibility = Visibility.DESCENDANTS
    # Whether its final replies are checked against an output schema (kept by the adapter,
    # which validates), and what an invalid one does.
    has_contract: bool = False
    contract: Contract = Contract.WARN

    def grants(self, target_agent: str) -> frozenset[str]:
        """The controls a live run of this agent may use on a descendant of ``target_agent``."""
        if self.controls is None:
            return DEFAULT_GRANTS
        granted: set[str] = set()
        for agent, controls in self.controls:
            if agent in (target_agent, "*"):
                granted.update(controls)
        return frozenset(granted)


# Every control a grant can name (ADR 0057): the job controls, the live channel's, reading a
# live job's output so far (``inspect``), and forking it into a new job.
CONTROLS = (
    "cancel",
    "pause",
    "continue",
    "finalize",
    "steer",
    "interrupt",
    "respond",
    "effort",
    "inspect",
    "fork",
)
# Without a ``controls`` table, what an ancestor's run could do before grants existed: talk to
# a descendant's live channel and read its output so far; never stop, pause or fork it.
DEFAULT_GRANTS = frozenset({"steer", "interrupt", "finalize", "respond", "effort", "inspect"})

DEFAULT_AGENT = AgentPolicy(name="", mode=Mode.WORKSPACE_WRITE, can_spawn=("",))
