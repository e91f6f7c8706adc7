"""Read models folded from the log. Each module is one projection."""

from engine.projection import Projection
from projections.streams import StreamsProjection


def default_projections() -> list[Projection]:
    """The read models every foldline log keeps."""
    return [StreamsProjection()]


__all__ = ["StreamsProjection", "default_projections"]
