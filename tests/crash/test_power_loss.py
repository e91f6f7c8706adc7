"""Power cuts on the log's real write path (ADR 0003): nothing acknowledged at full is lost,
at normal only a whole suffix of commits, and every cut leaves a log that verifies.

Each cut is ``workload:sync:seed`` (``tests.support.powercut_runs``); a failure prints it
with the command that replays it: ``FOLDLINE_POWERCUT=workload:sync:seed``. The run in
``make test`` tries 8 cuts per workload and level (96); the ``slow`` run 40 each (480), and
prints the loss window at normal (run it with ``-s`` to see it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.powercut_runs import SYNCS, WORKLOADS, Outcome, cut, operations

QUICK_SEEDS = range(8)
SLOW_SEEDS = range(1000, 1040)
_DRY: dict[tuple[str, str], int] = {}


def _operations(name: str, sync: str, tmp_path: Path) -> int:
    if (name, sync) not in _DRY:
        _DRY[name, sync] = operations(WORKLOADS[name], sync, tmp_path / "dry")
    return _DRY[name, sync]


def _cuts(name: str, sync: str, seeds: range, tmp_path: Path) -> list[Outcome]:
    dry = _operations(name, sync, tmp_path)
    return [cut(WORKLOADS[name], sync, seed, tmp_path / f"cut{seed}", dry) for seed in seeds]


def _summary(outcomes: list[Outcome]) -> str:
    first = outcomes[0]
    lossy = [o for o in outcomes if o.lost]
    line = (
        f"power cuts {first.workload}:{first.sync}: {len(outcomes)} cuts,"
        f" {sum(o.acked for o in outcomes)} acknowledged commits,"
        f" {len(lossy)} cuts lost some"
    )
    if lossy:
        line += (
            f", at most {max(o.lost for o in lossy)} commits"
            f" and {max(o.window_ms for o in lossy):.1f} ms"
        )
    return line


@pytest.mark.crash
@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_power_cut_loses_nothing_acknowledged_at_full_and_only_a_suffix_at_normal(
    name: str, sync: str, tmp_path: Path
) -> None:
    outcomes = _cuts(name, sync, QUICK_SEEDS, tmp_path)
    print(_summary(outcomes))
    if sync == "full":
        assert not any(o.lost for o in outcomes)
    assert sum(o.operations for o in outcomes) > 0


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_power_cut_many_cuts(name: str, sync: str, tmp_path: Path) -> None:
    outcomes = _cuts(name, sync, SLOW_SEEDS, tmp_path)
    print(_summary(outcomes))
    if sync == "full":
        assert not any(o.lost for o in outcomes)
    assert len(outcomes) == len(SLOW_SEEDS)


@pytest.mark.crash
@pytest.mark.skipif("FOLDLINE_POWERCUT" not in os.environ, reason="replays a printed cut")
def test_power_cut_replay(tmp_path: Path) -> None:
    """``FOLDLINE_POWERCUT=workload:sync:seed``: run that one cut again."""
    name, sync, seed = os.environ["FOLDLINE_POWERCUT"].split(":")
    outcome = cut(
        WORKLOADS[name], sync, int(seed), tmp_path / "cut", _operations(name, sync, tmp_path)
    )
    print(outcome)
    assert outcome.operations > 0


@pytest.mark.crash
def test_power_cut_after_a_new_log_loses_it_without_the_directory_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model has teeth (ADR 0055): a power cut right after a new log's appends, with its
    new folder made but never synced into its parent, takes every acknowledged commit."""
    workload = WORKLOADS["create"]
    dry = _operations("create", "full", tmp_path)
    kept = cut(workload, "full", 0, tmp_path / "synced", dry, mode="drop", at=dry + 1)
    assert kept.acked and not kept.lost

    def make_dirs(folder: Path, mode: int = 0o777) -> None:
        Path(folder).mkdir(mode, parents=True, exist_ok=True)  # no fsync of the parents

    monkeypatch.setattr("engine.storage.durable.make_dirs", make_dirs)
    with pytest.raises(AssertionError, match="the log file is gone"):
        cut(workload, "full", 0, tmp_path / "unsynced", dry, mode="drop", at=dry + 1)
