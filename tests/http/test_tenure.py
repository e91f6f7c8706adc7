"""The tenure's decisions in one process: the lease file judged by epoch, staleness on an
injected monotonic clock (the crash tests prove the same with real servers)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from adapters.services.tenure import Tenure
from adapters.system.leasefile import LeaseRecord
from engine.domain.errors import LeaseBusy
from tests.http.conftest import MakeClient


def test_tenure_restores_an_older_record_and_loses_to_a_newer_epoch(
    make_client: MakeClient,
) -> None:
    _, runtime = make_client()
    runtime.ensure_lease()
    tenure = runtime.tenure
    mine = tenure.file.read()
    assert mine is not None and mine.epoch == 1
    for stale in (
        LeaseRecord("zombie", 0, "h", 1, 0.0),  # older epoch
        LeaseRecord("contender", 1, "h", 1, 0.0),  # same epoch, lost its confirm
        None,  # removed
    ):
        if stale is None:
            tenure.file.path.unlink()
        else:
            tenure.file.replace(stale)
        assert tenure.check() is True
        restored = tenure.file.read()
        assert restored is not None and (restored.holder, restored.epoch) == (runtime.holder, 1)
    assert not tenure.lost.is_set()
    tenure.file.replace(LeaseRecord("newer", 2, "h", 1, 0.0))
    assert tenure.check() is False
    assert tenure.lost.is_set() and runtime.shutdown.is_set()
    assert json.loads(tenure.file.path.read_text())["holder"] == "newer"  # left as found
    with pytest.raises(LeaseBusy):
        runtime.ensure_lease()


def test_tenure_judges_stale_only_after_the_whole_window_on_its_own_clock(
    make_client: MakeClient,
) -> None:
    _, runtime = make_client()
    now = [100.0]
    tenure = Tenure(
        replace(runtime.config, lease_stale_s=45),
        "other",
        engine=lambda: runtime.engine,
        recover=lambda: None,
        is_recovered=lambda: True,
        on_renewed=lambda: None,
        stopping=runtime.shutdown,
        monotonic=lambda: now[0],
    )
    observed = ("record", "row")
    with pytest.raises(LeaseBusy):
        tenure._judge_stale(observed)  # first sight starts the window
    now[0] += 45
    with pytest.raises(LeaseBusy):
        tenure._judge_stale(observed)  # exactly the window: not yet
    with pytest.raises(LeaseBusy):
        tenure._judge_stale(("renewed", "row"))  # any change starts it again
    now[0] += 45.5
    tenure._judge_stale(("renewed", "row"))  # past the window, unchanged: stale


def test_tenure_goes_on_when_another_worker_of_its_instance_claims_the_file_first(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers of one server racing for a fresh lease: both read no file, one creates it,
    and the other's create-exclusive claim fails. The record there is its own instance's, so
    it holds the lease too instead of answering lease-busy (a 503 the caller did not cause)."""
    _, runtime = make_client()
    assert runtime.lease_holder() is None  # the log is open; nothing holds the lease yet
    tenure = runtime.tenure
    read_file = tenure.file.read
    raced: list[bool] = []

    def read_before_the_sibling_claims() -> LeaseRecord | None:
        if raced:
            return read_file()
        raced.append(True)
        assert tenure.file.claim(LeaseRecord(runtime.holder, 0, "h", 1, 0.0))  # the sibling
        return None  # what this worker read just before

    monkeypatch.setattr(tenure.file, "read", read_before_the_sibling_claims)
    runtime.ensure_lease()
    assert raced and runtime.lease_holder() == (runtime.holder, 1)
