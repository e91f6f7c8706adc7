from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_audit import make_log


@pytest.fixture
def clean(tmp_path: Path) -> Path:
    """A small, realistic log of the built-in machines (23 events)."""
    path = tmp_path / "clean.db"
    make_log(path)
    return path
