"""The operator token file: made once under a race, 0600 in a 0700 directory, re-read when it
is rotated, and never made when ``FOLDLINE_TOKEN`` is set."""

from __future__ import annotations

import stat
import threading
from dataclasses import replace
from pathlib import Path

from adapters.settings import operator_token
from adapters.settings.config import load_config
from adapters.settings.operator_token import OperatorToken


def test_operator_token_racing_creators_agree_on_one_token(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "foldline.db.token"
    seen: list[str] = []
    barrier = threading.Barrier(8)

    def create() -> None:
        barrier.wait(timeout=10)
        seen.append(operator_token.create(path))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(seen) == 8 and len(set(seen)) == 1 and len(seen[0]) >= 40
    assert path.read_text().strip() == seen[0]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_operator_token_is_read_again_after_a_rotation(tmp_path: Path) -> None:
    config = load_config({}, workspace=str(tmp_path))
    token = OperatorToken(config)
    assert token.current() is None  # before the first activation: nobody is the operator
    token.ensure()
    first = token.current()
    assert first is not None and first == config.operator_token_file.read_text().strip()
    second = operator_token.rotate(config.operator_token_file)
    assert second != first and token.current() == second
    assert stat.S_IMODE(config.operator_token_file.stat().st_mode) == 0o600


def test_operator_token_from_the_environment_writes_no_file(tmp_path: Path) -> None:
    config = replace(load_config({}, workspace=str(tmp_path)), token="from-env")
    token = OperatorToken(config)
    token.ensure()
    assert token.current() == "from-env"
    assert not config.operator_token_file.exists()
    assert not config.operator_token_file.parent.exists()
