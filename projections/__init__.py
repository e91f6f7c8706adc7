"""Read models folded from the log, one module per projection, and the composition of a
ready-to-use engine over them.

The head of every stream (``streams``) is built into the engine because the log itself reads
it; the domain read models live here, and ``view.SqlDomainView`` lets the engine's rules read
them inside the write transaction.
"""

from __future__ import annotations

import os

from engine.clock import Clock
from engine.domain import MACHINES
from engine.domain.engine import DomainEngine, domain_engine
from engine.domain.rules import Settings
from engine.log import Sync, open_log
from engine.machines import MachineSpec
from engine.projection import Projection
from projections.channel import ChannelProjection
from projections.jobs import JobsProjection
from projections.leases import LeasesProjection
from projections.push import PushProjection
from projections.retired import RetiredProjection
from projections.runs import RunsProjection
from projections.sessions import SessionsProjection
from projections.tasks import TasksProjection
from projections.view import SqlDomainView


def default_projections() -> list[Projection]:
    """The read models every foldline server keeps, besides the engine's own ``streams``."""
    return [
        LeasesProjection(),
        SessionsProjection(),
        JobsProjection(),
        TasksProjection(),
        RunsProjection(),
        ChannelProjection(),
        PushProjection(),
        RetiredProjection(),
    ]


def open_engine(
    path: str | os.PathLike[str],
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    sync: Sync = "full",
    extra_machines: tuple[MachineSpec, ...] = (),
    extra_projections: tuple[Projection, ...] = (),
    record_declarations: bool = False,
) -> DomainEngine:
    """Open the log at ``path`` with the four domain machines and their read models, and
    return the command API over it. An extra machine of a built-in kind replaces it (a
    plugin's revision). See ``open_log`` for what can be raised, and for
    ``record_declarations``."""
    machines = {spec.kind: spec for spec in (*MACHINES, *extra_machines)}
    log = open_log(
        path,
        list(machines.values()),
        [*default_projections(), *extra_projections],
        clock=clock,
        sync=sync,
        record_declarations=record_declarations,
    )
    return domain_engine(log, SqlDomainView, settings)


__all__ = ["default_projections", "open_engine"]
