"""``FOLDLINE_SHARED_VOLUME=1`` (ADR 0035): the lease file is judged before the log is opened,
and a server that does not hold the lease answers lease-busy for everything but ``/ping`` and
the agent card, with no descriptor on the log or its sidecars in any of its processes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from adapters.config import LEASE_BUSY_TEXT, ConfigError, load_config
from adapters.leasefile import LeaseRecord
from engine.domain.errors import LeaseBusy
from tests.http.conftest import MakeClient
from tests.support.server import RECOVERY_RUNNER, Server, serve, stop

LOG_FILES = ("foldline.db", "foldline.db-wal", "foldline.db-shm")
ENV = {"FOLDLINE_RUNNER": RECOVERY_RUNNER}  # a quick echo; the default lease timings
CARD = "/.well-known/agent-card.json"


# -- the setting -------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "on"), [("1", True), ("true", True), ("0", False), ("", False)])
def test_shared_volume_setting_reads_yes_and_no(workspace: Path, text: str, on: bool) -> None:
    config = load_config({"FOLDLINE_SHARED_VOLUME": text}, workspace=str(workspace))
    assert config.shared_volume is on


def test_shared_volume_setting_refuses_other_values_and_a_postgresql_log(
    workspace: Path,
) -> None:
    with pytest.raises(ConfigError, match="FOLDLINE_SHARED_VOLUME='maybe'"):
        load_config({"FOLDLINE_SHARED_VOLUME": "maybe"}, workspace=str(workspace))
    with pytest.raises(ConfigError, match="PostgreSQL"):
        load_config(
            {"FOLDLINE_SHARED_VOLUME": "1", "FOLDLINE_DB": "postgresql://u@127.0.0.1/db"},
            workspace=str(workspace),
        )


# -- the gate's order, in one process -----------------------------------------------------------


def test_shared_volume_judges_the_lease_file_before_opening_the_log(
    make_client: MakeClient,
) -> None:
    client, runtime = make_client(shared_volume=True)
    db = runtime.config.db
    db.parent.mkdir(parents=True, exist_ok=True)
    runtime.tenure.file.replace(LeaseRecord("other-server", 1, "h", 1, 0.0))
    for path in ("/v1/sessions", "/console/api/overview", "/metrics", "/console/"):
        answer = client.simulate_get(path)
        assert answer.status_code == 503, path
        assert LEASE_BUSY_TEXT in answer.text
    assert client.simulate_post("/invocations", json={"get": "k"}).status_code == 503
    assert client.simulate_get("/ping").status_code == 200
    assert client.simulate_get(CARD).status_code == 200
    assert not runtime.is_open and not db.exists()  # nothing opened, nothing created
    runtime.tenure.file.path.unlink()  # the other server released
    assert client.simulate_get("/v1/sessions").status_code == 200
    assert runtime.is_open and runtime.lease_holder() == (runtime.holder, 1)


def test_shared_volume_closes_the_log_again_when_the_log_refuses_the_lease(
    make_client: MakeClient,
) -> None:
    """The file gate passed (no file) but the log's lease is another's: the refusal closes
    the log again, so a process that does not hold the lease keeps no descriptor on it."""
    _, other = make_client(holder="other-server")
    other.ensure_lease()
    other.tenure.file.path.unlink()
    _, runtime = make_client(shared_volume=True)
    with pytest.raises(LeaseBusy):
        runtime.ensure_lease()
    assert not runtime.is_open


# -- real servers: no descriptor on the log in a non-holder ------------------------------------


def _processes(server: Server, workers: int) -> list[int]:
    """The master and its workers (waited for, bounded: gunicorn forks them at boot)."""
    master = server.process.pid
    deadline = time.monotonic() + 30
    while True:
        children = [
            int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _parent(int(pid)) == master
        ]
        if len(children) >= workers:
            return [master, *children]
        assert time.monotonic() < deadline, f"{workers} workers never appeared: {children}"
        time.sleep(0.05)


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _log_descriptors(pids: list[int], workspace: Path) -> list[str]:
    logs = {str(workspace / ".foldline" / name) for name in LOG_FILES}
    found = []
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd")
        for fd in fds.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:  # closed meanwhile
                continue
            if target in logs:
                found.append(f"{pid}: {target}")
    return found


def _rpc(server: Server, method: str, params: dict[str, object]) -> tuple[int, bytes]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    status, _, raw = server.request("POST", "/", body, {"Content-Type": "application/json"})
    return status, raw


@pytest.mark.server
def test_shared_volume_non_holder_opens_nothing_then_takes_over_on_release(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, ENV) as first:
        status, receipt = first.invoke({"prompt": "hello", "id": "k1"})
        assert status == 200 and receipt["status"] == "ok"
        shared = {**ENV, "FOLDLINE_SHARED_VOLUME": "1"}
        with serve(workspace, shared, workers=2) as second:
            refused = [
                second.request("GET", "/v1/sessions"),
                second.request("GET", "/v1/events"),
                second.request("POST", "/invocations", {"get": "k1"}),
                second.request("GET", "/console/"),
                second.request("GET", "/console/api/overview"),
                second.request("GET", "/metrics"),
            ]
            for status, _, raw in refused:
                assert status == 503 and LEASE_BUSY_TEXT in raw.decode(), raw
            assert json.loads(refused[0][2])["error"]["code"] == "lease_busy"
            status, raw = _rpc(second, "GetTask", {"id": "k1"})
            assert status == 503 and LEASE_BUSY_TEXT in raw.decode()
            assert second.request("GET", "/ping")[0] == 200
            assert second.request("GET", CARD)[0] == 200
            pids = _processes(second, workers=2)
            assert _log_descriptors(pids, workspace) == []

            stop(first.process)  # graceful: the lease is released before it exits
            status, _, raw = second.request("GET", "/v1/sessions")
            assert status == 200, raw
            status, body = second.invoke({"get": "k1"})
            assert status == 200 and body["status"] == "ok"
            status, raw = _rpc(second, "GetTask", {"id": "no-such-task"})
            assert status == 200 and json.loads(raw)["error"]["code"] == -32001  # read the log
            lease = json.loads((workspace / ".foldline" / "foldline.db.lease").read_text())
            assert lease["epoch"] == 2
            # the probe sees a holder's descriptors: the check above was not vacuous
            assert _log_descriptors(_processes(second, workers=2), workspace) != []
