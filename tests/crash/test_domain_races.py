"""Writers racing for one prize, in threads and in two processes: exactly one wins each time."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from engine import EngineError
from projections import open_engine
from tests.support.backends import BACKENDS, log_target
from tests.support.races import SETTINGS, attempt, prepare

ROOT = Path(__file__).resolve().parents[2]
LOSERS = {"capacity": "admission_rejected", "pointer": "conflict", "finish": "invalid_transition"}


def _prepared(db: str) -> None:
    engine = open_engine(db, SETTINGS)
    prepare(engine)
    engine.log.close()


def _audit(db: str) -> None:
    engine = open_engine(db, SETTINGS)
    assert engine.log.verify_chain() == []
    assert engine.log.content_hash() == engine.log.rebuild()
    engine.log.close()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("race", sorted(LOSERS))
def test_domain_race_between_threads_has_exactly_one_winner(
    tmp_path: Path, race: str, backend: str
) -> None:
    db = log_target(backend, tmp_path)
    _prepared(db)
    engine = open_engine(db, SETTINGS)
    start = threading.Barrier(16)
    outcomes: list[str] = []

    def contender(i: int) -> None:
        start.wait(timeout=10)
        try:
            engine.handle(attempt(race, f"t{i}"))
            outcomes.append("ok")
        except EngineError as ex:
            outcomes.append(ex.code)

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    engine.log.close()
    assert Counter(outcomes) == {"ok": 1, LOSERS[race]: 15}
    _audit(db)


@pytest.mark.crash
@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("race", sorted(LOSERS))
def test_domain_race_between_two_processes_has_exactly_one_winner(
    tmp_path: Path, race: str, backend: str
) -> None:
    db = log_target(backend, tmp_path)
    _prepared(db)
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.racer", db, race, name, "8", str(go)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("p1", "p2")
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    go.touch()
    outcomes: list[str] = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        outcomes += out.split()
    assert Counter(outcomes) == {"ok": 1, LOSERS[race]: 15}
    _audit(db)
