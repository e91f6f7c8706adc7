"""Shared-volume mode (ADRs 0035, 0042): the lease file is judged before the log is opened,
and a server that does not hold the lease answers lease-busy for everything but ``/ping`` and
the agent card, with no descriptor on the log or its sidecars in any of its processes; its
A2A endpoint answers lease-busy as JSON-RPC -32603 in HTTP 200, as in every mode. The servers
here decide the mode from a mount table (``tests.support.mount_table``), as on EFS.

How the mode is decided from the setting and the table: tests/unit/test_shared_volume_mode.py."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest
from a2a.utils.errors import A2AError, InternalError

from adapters.http.a2a import jsonrpc
from adapters.services.runtime import Runtime
from adapters.settings.config import LEASE_BUSY_TEXT
from adapters.system import mounts
from adapters.system.leasefile import LeaseRecord
from engine.domain.errors import LeaseBusy
from tests.http.conftest import MakeClient
from tests.support.a2a import user_message
from tests.support.server import RECOVERY_RUNNER, Server, read_until, serve, stop

LOG_FILES = ("foldline.db", "foldline.db-wal", "foldline.db-shm")
ENV = {"FOLDLINE_RUNNER": RECOVERY_RUNNER}  # a quick echo; the default lease timings
CARD = "/.well-known/agent-card.json"
# The ErrorInfo of a busy workspace's -32603 (A2A 1.0 §9.5): the source's code and text, and why.
BUSY_INFO = {
    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
    "reason": "INTERNAL_ERROR",
    "domain": "a2a-protocol.org",
    "metadata": {"code": "lease_busy"},
}
LOCAL_TABLE = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n"


def nfs4_table(point: Path) -> str:
    """The local root with EFS mounted at ``point`` as efs-utils does it (NFS 4.1 through its
    TLS tunnel on 127.0.0.1)."""
    return LOCAL_TABLE + (
        f"97 27 0:52 / {point} rw,relatime shared:51 - nfs4 127.0.0.1:/ rw,vers=4.1,"
        "rsize=1048576,wsize=1048576,hard,noresvport,proto=tcp,port=20049,addr=127.0.0.1\n"
    )


def on_table(table: Path) -> list[str]:
    """``serve``'s prefix for a server that reads its mount table from ``table``."""
    return [sys.executable, "-m", "tests.support.mount_table", str(table)]


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


def _held_elsewhere(runtime: Runtime) -> None:
    runtime.config.db.parent.mkdir(parents=True, exist_ok=True)
    runtime.tenure.file.replace(LeaseRecord("other-server", 1, "h", 1, 0.0))


def test_shared_volume_a2a_lease_busy_is_json_rpc_with_the_request_id(
    make_client: MakeClient,
) -> None:
    """HTTP 200 and -32603 with the fixed text, as every mode answers it; the id is the
    request's when the body is a JSON-RPC object within the limit, else null; no other check
    comes first (an unknown method, a bad version header), as in the source system."""
    client, runtime = make_client(shared_volume=True)
    _held_elsewhere(runtime)
    busy = {"code": -32603, "message": LEASE_BUSY_TEXT, "data": [BUSY_INFO]}
    envelope = {"jsonrpc": "2.0", "id": "r-7", "method": "GetTask", "params": {"id": "t"}}
    answer = client.simulate_post("/", json=envelope)
    assert answer.status_code == 200 and answer.json == {
        "jsonrpc": "2.0",
        "id": "r-7",
        "error": busy,
    }
    assert LEASE_BUSY_TEXT.encode() in answer.content  # the text as it is, em dash and all
    unknown = {**envelope, "id": 8, "method": "NoSuchMethod"}
    answer = client.simulate_post("/", json=unknown, headers={"A2A-Version": "9.9"})
    assert answer.json == {"jsonrpc": "2.0", "id": 8, "error": busy}
    for body in (b"{not json", b"[1, 2]", json.dumps({**envelope, "id": [1]}).encode()):
        answer = client.simulate_post("/", body=body)
        assert answer.status_code == 200 and answer.json == {
            "jsonrpc": "2.0",
            "id": None,
            "error": busy,
        }
    too_large = b'{"jsonrpc": "2.0", "id": "big", "pad": "' + b"x" * jsonrpc.MAX_BODY + b'"}'
    assert client.simulate_post("/", body=too_large).json["id"] is None
    assert client.simulate_get("/ping").json["status"] == "Healthy"
    assert not runtime.is_open and not runtime.config.db.exists()


def test_shared_volume_mode_pending_turns_on_when_a_network_mount_appears(
    make_client: MakeClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Off at boot on the local disk, judged again before the log first opens: a network
    file system mounted under the log since (AgentCore mounts at the first invocation) turns
    the mode on, and the first request is already gated."""
    table = tmp_path / "mountinfo"
    table.write_text(LOCAL_TABLE)
    monkeypatch.setattr(mounts, "MOUNTINFO", str(table))
    client, runtime = make_client()
    volume = runtime.config.volume
    assert not runtime.config.shared_volume and volume is not None and volume.is_pending
    _held_elsewhere(runtime)
    table.write_text(nfs4_table(runtime.config.workspace))
    answer = client.simulate_get("/v1/sessions")
    assert answer.status_code == 503 and answer.json["error"]["code"] == "lease_busy"
    assert runtime.config.shared_volume and runtime.tenure.config.shared_volume
    assert not runtime.is_open
    shown = capsys.readouterr().err
    assert f"now lies on nfs4 (127.0.0.1:/ at {runtime.config.workspace})" in shown


def test_shared_volume_mode_stays_off_once_the_log_opened_on_the_local_disk(
    make_client: MakeClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log opened while it lay on the local disk: the mode stays as it was decided."""
    table = tmp_path / "mountinfo"
    table.write_text(LOCAL_TABLE)
    monkeypatch.setattr(mounts, "MOUNTINFO", str(table))
    client, runtime = make_client()
    assert client.simulate_get("/v1/sessions").status_code == 200
    assert runtime.is_open
    table.write_text(nfs4_table(runtime.config.workspace))  # too late: the log is open here
    assert client.simulate_get("/v1/sessions").status_code == 200
    assert not runtime.config.shared_volume


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


@contextlib.contextmanager
def holder_and_standby(
    tmp_path: Path, table: str, workers: int = 1
) -> Iterator[tuple[Server, Server]]:
    """Two servers on one workspace: the first on this machine's own mount table, holding the
    lease (job ``k1`` done); the second reading ``table``, started once the first holds it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, ENV) as first:
        status, receipt = first.invoke({"prompt": "hello", "id": "k1"})
        assert status == 200 and receipt["status"] == "ok"
        mountinfo = tmp_path / "mountinfo"
        mountinfo.write_text(table)
        with serve(workspace, ENV, workers=workers, prefix=on_table(mountinfo)) as second:
            yield first, second


@pytest.mark.server
def test_shared_volume_server_on_nfs4_opens_nothing_then_takes_over_on_release(
    tmp_path: Path,
) -> None:
    """The mode decided from the mount, and said so at boot: off on this machine's disk, on
    where the table puts the log on nfs4 (no FOLDLINE_SHARED_VOLUME in either)."""
    workspace = tmp_path / "ws"
    db = workspace / ".foldline" / "foldline.db"
    with holder_and_standby(tmp_path, nfs4_table(tmp_path), workers=2) as (first, second):
        local = read_until(first, "shared-volume mode")
        assert f"foldline: shared-volume mode off: the log {db} lies on " in local
        assert "a local file system; judged again before the log first opens" in local
        shown = read_until(second, "shared-volume mode")
        print(next(line for line in shown.splitlines() if "shared-volume mode" in line))
        assert (
            f"foldline: shared-volume mode on: the log {db} lies on nfs4 (127.0.0.1:/ at"
            f" {tmp_path}), a network file system; the log opens only under the lease"
            " (FOLDLINE_SHARED_VOLUME=0 turns it off)"
        ) in shown
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
        assert json.loads(refused[2][2]) == {"error": LEASE_BUSY_TEXT}
        status, raw = _rpc(second, "GetTask", {"id": "k1"})
        assert status == 200 and json.loads(raw) == {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32603, "message": LEASE_BUSY_TEXT, "data": [BUSY_INFO]},
        }
        status, _, raw = second.request("GET", "/ping")
        assert status == 200 and json.loads(raw)["status"] == "Healthy"
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


@pytest.mark.server
def test_shared_volume_server_turns_on_when_the_log_s_mount_appears_after_boot(
    tmp_path: Path,
) -> None:
    """AgentCore mounts its file system at the first invocation: a server that booted off on
    the local disk judges the mode again before its first request opens the log."""
    workspace = tmp_path / "ws"
    with holder_and_standby(tmp_path, LOCAL_TABLE) as (_, second):
        assert "a local file system; judged again" in read_until(second, "shared-volume mode off")
        (tmp_path / "mountinfo").write_text(nfs4_table(workspace))  # mounted since the boot
        status, _, raw = second.request("GET", "/v1/sessions")
        assert status == 503 and LEASE_BUSY_TEXT in raw.decode(), raw
        line = read_until(second, "now lies on")
        assert f"shared-volume mode on: the log {workspace / '.foldline' / 'foldline.db'}" in line
        assert _log_descriptors(_processes(second, workers=1), workspace) == []


# -- A2A callers against a server that does not hold the lease ----------------------------------

# The source's A2A caller: lease-busy is -32603 with this prefix, retried after 5, 10, 15 and
# 20 s (50 s in all, past the 45 s stale window); a -32603 with another text is not retried.
RETRIES_S = (5, 10, 15, 20)
BUSY_PREFIX = "workspace is in use by another runtime session"


async def _official_client_errors(url: str) -> list[Exception]:
    """What the a2a-sdk client raises for a blocking send, a streaming send and a GetTask."""
    errors: list[Exception] = []
    blocking = await create_client(url, client_config=ClientConfig(streaming=False))
    streaming = await create_client(url)
    for call in (
        lambda: anext(blocking.send_message(user_message("m-1", "hello"))),
        lambda: anext(streaming.send_message(user_message("m-2", "hello"))),
        lambda: blocking.get_task(GetTaskRequest(id="k1")),
    ):
        try:
            await call()
        except A2AError as error:
            errors.append(error)
    for client in (blocking, streaming):
        await client.close()
    return errors


def _send_retrying(server: Server, refused: threading.Event) -> list[tuple[int, dict[str, Any]]]:
    """A halo-style SendMessage: retried on lease-busy at ``RETRIES_S``, bounded by them; every
    answer, in order."""
    envelope = {
        "jsonrpc": "2.0",
        "id": "halo-1",
        "method": "SendMessage",
        "params": {
            "message": {"messageId": "m-halo", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
        },
    }
    headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    answers = []
    for pause in (*RETRIES_S, None):
        status, _, raw = server.request("POST", "/", envelope, headers, timeout=60)
        answer = json.loads(raw)
        answers.append((status, answer))
        error = answer.get("error") or {}
        busy = error.get("code") == -32603 and error.get("message", "").startswith(BUSY_PREFIX)
        if not busy or pause is None:
            break
        refused.set()
        time.sleep(pause)  # the caller's schedule under test, not a wait for the server
    return answers


@pytest.mark.server
@pytest.mark.slow
def test_shared_volume_a2a_callers_see_lease_busy_and_retry_until_the_holder_releases(
    tmp_path: Path,
) -> None:
    with holder_and_standby(tmp_path, nfs4_table(tmp_path)) as (first, second):
        read_until(second, "shared-volume mode on")
        errors = asyncio.run(_official_client_errors(f"http://127.0.0.1:{second.port}"))
        for error in errors:
            print(f"a2a-sdk client: {error!r}")
        assert [type(error) for error in errors] == [InternalError] * 3  # -32603, in HTTP 200
        assert all(error.message == LEASE_BUSY_TEXT for error in errors)  # type: ignore[attr-defined]

        refused = threading.Event()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            caller = pool.submit(_send_retrying, second, refused)
            assert refused.wait(30), caller.result(0) if caller.done() else "no answer in 30 s"
            stop(first.process)  # graceful: the lease is released before it exits
            answers = caller.result(timeout=sum(RETRIES_S) + 60)
    *busy, (_, last) = answers
    error = {"code": -32603, "message": LEASE_BUSY_TEXT, "data": [BUSY_INFO]}
    assert busy and all(
        answer == {"jsonrpc": "2.0", "id": "halo-1", "error": error} for _, answer in busy
    ), busy
    assert all(status == 200 for status, _ in answers)
    assert last["id"] == "halo-1" and "error" not in last, last
    task = last["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    print(f"halo-style caller: {len(busy)} lease-busy answer(s), then {task['status']['state']}")
