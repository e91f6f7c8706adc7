"""The front's ``/ping`` stamp moves only when the status it answers changes, whichever source
(its notify hooks, the worker's answer, the worker's silence) the status comes from: AgentCore
reads a moving ``time_of_last_update`` as activity and keeps such a session to its maximum
lifetime. No process: the worker's answers are stood in for."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.front import worker
from adapters.front.lifecycle import Front
from adapters.front.settings import FrontConfig
from adapters.settings.config import RunUser

Answer = tuple[int, bytes] | None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    bound = socket.socket()
    bound.bind(("127.0.0.1", 0))
    yield bound
    bound.close()


def _front(tmp_path: Path, listener: socket.socket, clock: Clock) -> Front:
    config = FrontConfig(
        base=tmp_path / "base",
        workspace=Path("/workspace"),
        bind="127.0.0.1:8080",
        worker_port=listener.getsockname()[1],
        run_user=RunUser(1000, 1000, "run"),
        state_dir=tmp_path / "state",
        notify="true",
    )
    return Front(config, {}, listener, clock=clock)


def _worker_says(status: str, stamp: int) -> Answer:
    return 200, json.dumps({"status": status, "time_of_last_update": stamp}).encode()


def _ping(front: Front) -> tuple[str, int]:
    code, body = front.ping()
    said = json.loads(body)
    assert code == 200 and set(said) == {"status", "time_of_last_update"}, said
    return said["status"], said["time_of_last_update"]


def test_front_ping_stamp_moves_only_when_its_status_changes(
    tmp_path: Path, listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    worker_answer: list[Answer] = [None]
    monkeypatch.setattr(worker, "ping", lambda config: worker_answer[0])
    front = _front(tmp_path, listener, clock)
    assert _ping(front) == ("Healthy", 1000)  # no worker yet
    clock.now = 1100
    front.serving = True
    worker_answer[0] = _worker_says("Healthy", 1050)
    assert _ping(front) == ("Healthy", 1000)  # the same status: the worker's stamp is not taken
    clock.now = 1200
    worker_answer[0] = _worker_says("HealthyBusy", 1190)
    assert _ping(front) == ("HealthyBusy", 1200)  # a job: changed
    clock.now = 1300
    front.hook_started()  # the job ended into a hook: busy all along
    assert _ping(front) == ("HealthyBusy", 1200)
    clock.now = 1400
    front.hook_started()
    front.hook_ended()  # a second hook came and went, the first still runs
    assert _ping(front) == ("HealthyBusy", 1200)
    clock.now = 1500
    front.hook_ended()
    worker_answer[0] = _worker_says("Healthy", 1290)  # the worker's stamp predates the hook
    assert _ping(front) == ("Healthy", 1500)  # idle from when the front saw it, not before
    clock.now = 1600
    assert _ping(front) == ("Healthy", 1500)  # idle stays idle: no restamp
    clock.now = 1700
    worker_answer[0] = None  # the worker does not answer in time: busy, to be safe
    assert _ping(front) == ("HealthyBusy", 1700)
    clock.now = 1800
    worker_answer[0] = _worker_says("HealthyBusy", 1790)
    assert _ping(front) == ("HealthyBusy", 1700)
    clock.now = 1650  # a clock stepped back
    worker_answer[0] = _worker_says("Healthy", 1640)
    assert _ping(front) == ("Healthy", 1700)  # a change, never stamped earlier than the last


def test_front_ping_passes_a_worker_answer_it_cannot_read_as_it_is(
    tmp_path: Path, listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    front = _front(tmp_path, listener, Clock())
    front.serving = True
    for odd in ((503, b'{"status": "Healthy"}'), (200, b"not json"), (200, b'{"status": "x"}')):
        monkeypatch.setattr(worker, "ping", lambda config, odd=odd: odd)
        assert front.ping() == odd
