"""Read models folded from the log, one module per projection.

The head of every stream (``streams``) is built into the engine, because the log itself reads it;
the read models of the domain machines (sessions, jobs, tasks, leases, runs) will live here.
"""

from engine.projection import Projection


def default_projections() -> list[Projection]:
    """The read models every foldline server keeps, besides the engine's own ``streams``."""
    return []


__all__ = ["default_projections"]
