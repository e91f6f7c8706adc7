from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import FixedClock, Log, open_log
from engine.domain.rules import Settings
from engine.engine import Engine
from projections import open_engine
from tests.support.postgres import stop_session_cluster
from tests.support.tickets import MACHINES, TicketTitles


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ws" / ".foldline" / "foldline.db"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def log(db_path: Path, clock: FixedClock) -> Iterator[Log]:
    opened = open_log(db_path, MACHINES, [TicketTitles()], clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def engine(tmp_path: Path, clock: FixedClock) -> Iterator[Engine]:
    opened = open_engine(
        tmp_path / "engine.db",
        Settings(resource_groups={"cpu": 2, "gpu": 1}, lease_stale_s=45, max_depth=3),
        clock=clock,
    )
    yield opened
    opened.log.close()


# The marks that say a file is long, the longest kind first.
LONG_MARKS = ("slow", "crash", "browser", "server")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long files first: those with a ``slow`` test, then ``crash``, ``browser`` and
    ``server`` ones, then the rest, each file still whole and in its order. ``make test``
    hands files to its workers in this order (``--dist loadfile --no-loadscope-reorder``): a
    long file handed out last would be the suite's tail, short ones fill the gaps at the end."""
    rank: dict[object, int] = {}
    for item in items:
        marks = [n for n, mark in enumerate(LONG_MARKS) if item.get_closest_marker(mark)]
        rank[item.path] = min([rank.get(item.path, len(LONG_MARKS)), *marks])
    items.sort(key=lambda item: rank[item.path])


@pytest.fixture(scope="session", autouse=True)
def _postgres_cluster() -> Iterator[None]:
    """Stops the session's PostgreSQL cluster if a test started one (tests.support.postgres)."""
    yield
    stop_session_cluster()
