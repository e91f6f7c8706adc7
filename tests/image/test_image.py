"""The Dockerfile, built and run by a real Docker engine (issue 25, goal 4).

One container of the image serves a job through ``/invocations`` as the run user, passes its
own HEALTHCHECK, stops on SIGTERM within its grace, exits 0, and leaves on the host's
workspace a log whose lease stream ends ``lease.released`` and that ``foldline verify``
accepts. The arm64 build runs where qemu-user-static is registered for aarch64, and says why
not where it is not.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.image.conftest import build, build_context, docker, make_base, must
from tests.support.cli import foldline
from tests.support.server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.server]

# Runs hide the log's directory in a mount namespace of their own, which a container gets
# only with CAP_SYS_ADMIN (docs/agentcore.md). Docker's default seccomp
# profile allows unshare and mount once the capability is there; hosts whose Docker applies
# an AppArmor profile also need --security-opt apparmor=unconfined.
RUN_FLAGS = ("--cap-add=SYS_ADMIN",)
QEMU_AARCH64 = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")


@pytest.fixture(scope="module")
def image(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The image built from this checkout on the cached base; removed afterwards (BuildKit's
    layer cache stays)."""
    tag = f"foldline-test:{secrets.token_hex(4)}"
    build(build_context(tmp_path_factory.mktemp("image")), tag, base_image)
    yield tag
    docker("image", "rm", "--force", tag, timeout=60)


@contextlib.contextmanager
def container(
    image: str,
    workspace: Path,
    port: int,
    *extra: str,
    inside: str = "/workspace",
    serves: int = 8080,
    caps: tuple[str, ...] = RUN_FLAGS,
) -> Iterator[str]:
    """``docker run -d`` of the image with ``workspace`` mounted at ``inside`` and the port it
    ``serves`` on published on a loopback port; removed (with force) afterwards."""
    name = f"foldline-test-{secrets.token_hex(4)}"
    must(
        docker(
            "run",
            "--detach",
            f"--name={name}",
            *caps,
            f"--publish=127.0.0.1:{port}:{serves}",
            f"--volume={workspace}:{inside}",
            "--env=FOLDLINE_DEMO_DELAY_S=0",
            *extra,
            image,
        )
    )
    try:
        yield name
    finally:
        docker("rm", "--force", name, timeout=60)


def state(name: str) -> dict[str, Any]:
    return json.loads(must(docker("inspect", "--format={{json .State}}", name)))  # type: ignore[no-any-return]


def logs(name: str) -> str:
    answer = docker("logs", name)
    return answer.stdout + answer.stderr


def call(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as ex:
        return ex.code, json.load(ex)


def wait_until_healthy(name: str, port: int, limit: float = 60) -> None:
    """Until /ping answers and Docker ran the image's HEALTHCHECK once with success."""
    deadline = time.monotonic() + limit
    while True:
        now = state(name)
        assert now["Running"], f"the container stopped: {now}\n{logs(name)}"
        if now.get("Health", {}).get("Status") == "healthy":
            with contextlib.suppress(OSError):
                if call(port, "GET", "/ping")[0] == 200:
                    return
        assert time.monotonic() < deadline, f"not healthy within {limit} s: {now}\n{logs(name)}"
        time.sleep(0.2)


def test_image_serves_a_job_as_the_run_user_and_stops_gracefully_on_sigterm(
    image: str, tmp_path: Path
) -> None:
    config = json.loads(must(docker("image", "inspect", "--format={{json .Config}}", image)))
    assert config["Cmd"] == ["foldline", "serve"]  # exec form: the server is PID 1
    assert {"FOLDLINE_BIND=0.0.0.0:8080", "FOLDLINE_WORKSPACE=/workspace"} <= set(config["Env"])
    assert "/workspace" in config["Volumes"] and "8080/tcp" in config["ExposedPorts"]
    assert config["StopSignal"] == "SIGTERM" and config["User"] in ("", "root")
    assert config["Healthcheck"]["Test"][0] == "CMD"

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    port = free_port()
    # The image's own HEALTHCHECK command, probed every second instead of every 30 s.
    with container(image, workspace, port, "--health-interval=1s") as name:
        wait_until_healthy(name, port)
        status, body = call(port, "POST", "/invocations", {"prompt": "hello"})
        assert (status, body["status"], body["result"]) == (200, "ok", "echo: hello\n"), body
        # Nothing is in flight once the run has ended (a moment after its answer at most).
        deadline = time.monotonic() + 10
        while (ping := call(port, "GET", "/ping")[1])["status"] != "Healthy":
            assert time.monotonic() < deadline, f"still {ping} 10 s after the job ended"
            time.sleep(0.1)

        # The run user owns the workspace; the log's directory stays root's and closed.
        folder = workspace / ".foldline"
        assert (workspace.stat().st_uid, workspace.stat().st_gid) == (1000, 1000)
        assert folder.stat().st_uid == 0 and folder.stat().st_mode & 0o777 == 0o700

        # docker stop sends the image's STOPSIGNAL to PID 1 (gunicorn's master) and kills
        # only after 30 s: a graceful stop is well inside that and exits 0.
        started = time.monotonic()
        must(docker("stop", "--time=30", name, timeout=90))
        took = time.monotonic() - started
        final = state(name)
        assert final["ExitCode"] == 0 and not final["OOMKilled"], (final, logs(name))
        assert took < 25, f"docker stop took {took:.1f} s: SIGTERM was not handled"

    db = folder / "foldline.db"
    history = foldline("history", str(db), "lease:workspace")
    assert history.returncode == 0, history.stderr
    events = [json.loads(line)["event_type"] for line in history.stdout.splitlines()]
    assert events[0] == "lease.acquired" and events[-1] == "lease.released", events
    verified = foldline("verify", str(db))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["ok"] is True


def test_image_takes_the_a2a_port_and_a_mount_path_from_the_environment(
    image: str, tmp_path: Path
) -> None:
    """AgentCore changes only the environment: A2A on 9000, its file system under /mnt. The
    HEALTHCHECK follows the port, and the log lands on the mounted workspace. Run as a plain
    ``docker run`` (no CAP_SYS_ADMIN): runs cannot be given namespaces of their own there, so
    the image boots only as ``FOLDLINE_RUN_USER=root`` says, with its warning (ADR 0064)."""
    workspace = tmp_path / "mounted"
    workspace.mkdir()
    port = free_port()
    settings = (
        "--env=FOLDLINE_BIND=0.0.0.0:9000",
        "--env=FOLDLINE_WORKSPACE=/mnt/workspace",
        "--env=FOLDLINE_RUN_USER=root",
    )
    with container(
        image,
        workspace,
        port,
        "--health-interval=1s",
        *settings,
        inside="/mnt/workspace",
        serves=9000,
        caps=(),
    ) as name:
        wait_until_healthy(name, port)
        said = logs(name)
        assert '"runs_as": "the server\'s user"' in said, said
        assert "FOLDLINE_RUN_USER=root: runs execute as root" in said, said
        status, card = call(port, "GET", "/.well-known/agent-card.json")
        assert status == 200 and card["capabilities"]["streaming"] is True, card
        status, body = call(port, "POST", "/invocations", {"prompt": "on the share"})
        assert (status, body["result"]) == (200, "echo: on the share\n"), body
        must(docker("stop", "--time=30", name, timeout=90))
        assert state(name)["ExitCode"] == 0, logs(name)
    assert (workspace / ".foldline" / "foldline.db").is_file()


def test_image_builds_and_runs_for_arm64_under_qemu(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``docker build --platform linux/arm64`` on an arm64 bookworm base (debootstrap under
    qemu-user-static), then the image answers a job. Skipped, with the reason, where the
    kernel has no aarch64 emulator registered: that is a fact of the host, not a failure."""
    if os.uname().machine == "aarch64":
        pytest.skip("the host is arm64: the other tests built and ran the arm64 image natively")
    if not QEMU_AARCH64.is_file() or "enabled" not in QEMU_AARCH64.read_text():
        pytest.skip(
            f"arm64 not tried: no aarch64 emulator enabled at {QEMU_AARCH64}"
            " (apt-get install qemu-user-static binfmt-support; update-binfmts --enable"
            " qemu-aarch64)"
        )
    request.getfixturevalue("docker_engine")
    base = make_base("foldline-test-base:bookworm-arm64", tmp_path, arch="arm64", timeout=1500)
    print(f"arm64 base: {base:.0f} s (0: cached)")
    context = build_context(
        tmp_path,
        (
            "--only-binary=:all:",
            "--implementation=cp",
            "--python-version=3.11",
            "--platform=manylinux_2_28_aarch64",
            "--platform=manylinux2014_aarch64",
            "--platform=manylinux_2_17_aarch64",
        ),
    )
    tag = f"foldline-test:arm64-{secrets.token_hex(4)}"
    started = time.monotonic()
    build(context, tag, "foldline-test-base:bookworm-arm64", platform="linux/arm64")
    print(f"arm64 build: {time.monotonic() - started:.0f} s")
    try:
        arch = must(docker("image", "inspect", "--format={{.Architecture}}", tag)).strip()
        assert arch == "arm64"
        workspace = tmp_path / "workspace"
        workspace.mkdir()
        port = free_port()
        with container(
            tag, workspace, port, "--platform=linux/arm64", "--health-interval=2s"
        ) as name:
            wait_until_healthy(name, port, limit=180)
            assert must(docker("exec", name, "uname", "-m")).strip() == "aarch64"
            status, body = call(port, "POST", "/invocations", {"prompt": "hello"})
            assert (status, body["result"]) == (200, "echo: hello\n"), body
            must(docker("stop", "--time=30", name, timeout=90))
            assert state(name)["ExitCode"] == 0, logs(name)
    finally:
        docker("image", "rm", "--force", tag, timeout=60)
