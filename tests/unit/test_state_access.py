"""The state directory's boot check as this process: what it names when the path cannot serve
as a directory (the modes and owners are tested as the run user in
tests/front/test_front_per_host.py, which needs root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.services.state_access import barrier, check
from adapters.settings.config_error import ConfigError


def test_state_access_takes_a_directory_or_one_it_can_make(tmp_path: Path) -> None:
    assert barrier(tmp_path, write=True) is None
    assert barrier(tmp_path / "new" / "deeper", write=True) is None  # made at first use
    assert barrier(tmp_path / "new" / "deeper", write=False) == f"{tmp_path / 'new'} does not exist"


def test_state_access_names_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert barrier(tmp_path / "file", write=True) == f"{tmp_path / 'file'} is not a directory"
    with pytest.raises(ConfigError) as caught:
        check(tmp_path / "file")
    assert str(caught.value) == (
        f"state directory {tmp_path / 'file'} (FOLDLINE_STATE_DIR):"
        f" {tmp_path / 'file'} is not a directory"
    )
    assert "\n" not in str(caught.value)
