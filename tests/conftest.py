from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import FixedClock, Log, open_log
from projections import default_projections
from tests.support.tickets import MACHINES, TicketTitles


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ws" / ".foldline" / "foldline.db"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def log(db_path: Path, clock: FixedClock) -> Iterator[Log]:
    opened = open_log(db_path, MACHINES, [*default_projections(), TicketTitles()], clock=clock)
    yield opened
    opened.close()
