"""The worker: ``foldline serve`` on the session's workspace, as the run user, on loopback.

Started through ``unshare --mount`` and the view helper (``adapters.front.view``), then
``setpriv`` (run user's uid and gid, no supplementary groups, no capabilities, no_new_privs).
Its environment is a named allowlist: foldline's own settings one by one (never ``FOLDLINE_*``
as a whole: ``FOLDLINE_NOTIFY`` and the front's settings stay with the front), every
``OTEL_*``, ``AGENT_OBSERVABILITY_*`` and ``AWS_CONTAINER_*``, the AWS credentials, what
``FOLDLINE_RUN_ENV`` names (so that it reaches the worker's runs), plus what the front sets:
the workspace, the loopback bind, one home and state directory of its own (per session
directory), the front's loopback URL and per-boot token, the listening socket's number, and
``FOLDLINE_SHARED_VOLUME=1``.

The worker's port is the front's from boot: ``reserve_port`` binds it (the set
``FOLDLINE_WORKER_PORT``, else one the kernel picks free), and the bound socket is handed to the
worker, whose gunicorn listens on it (``fd://``). Nothing can take the port between its choice
and the worker's start, so two fronts on one host never collide, and a set port in use is a
boot error, not a worker that cannot bind.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
from collections.abc import Mapping

from adapters.front.settings import FrontConfig
from adapters.services import state_access
from adapters.services.sandbox import as_user
from adapters.settings.config_error import ConfigError

NAMED = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "FOLDLINE_RUNNER",
    "FOLDLINE_AGENTS_FILE",
    "FOLDLINE_RESOURCE_GROUPS",
    "FOLDLINE_PUBLIC_URL",
    "FOLDLINE_TOKEN",
    "FOLDLINE_SYNC",
    "FOLDLINE_WORKERS",
    "FOLDLINE_THREADS",
    "FOLDLINE_LEASE_RENEW_S",
    "FOLDLINE_LEASE_CONFIRM_S",
    "FOLDLINE_LEASE_STALE_S",
    "FOLDLINE_START_GRACE_S",
    "FOLDLINE_TRANSITION_GRACE_S",
    "FOLDLINE_JOB_TIMEOUT_S",
    "FOLDLINE_SYNC_WAIT_S",
    "FOLDLINE_SSE_KEEPALIVE_S",
    "FOLDLINE_NOTIFY_TIMEOUT_S",
    "FOLDLINE_A2A_KEEPALIVE_S",
    "FOLDLINE_STOP_GRACE_S",
    "FOLDLINE_SERVER_STOP_GRACE_S",
    "FOLDLINE_SERVER_STOP_LINGERING",
    "FOLDLINE_RUN_ENV",
    "FOLDLINE_ACCESS",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
)
PREFIXES = ("OTEL_", "AGENT_OBSERVABILITY_", "AWS_CONTAINER_")


def reserve_port(config: FrontConfig) -> socket.socket:
    """The worker's port, bound (not listening: a connection before the worker is up is
    refused) for the front's whole life; ``config.worker_port`` 0 lets the kernel pick a free
    one, which no bind(0) or outgoing connection of another process is then given.

    A set port gets ``SO_REUSEADDR``, as gunicorn's own bind did, so a front restarted on it
    is not refused for the last one's closed connections; a picked port needs none.

    Raises:
        ConfigError: the set port cannot be bound (in use, say).
    """
    listener = _bound(config.worker_port)
    if not config.worker_port and _port(config.bind) == listener.getsockname()[1]:
        # The front's own port, not bound yet (it is, right after this): pick again while
        # the first is held, so the kernel cannot give the same one twice.
        first, listener = listener, _bound(0)
        first.close()
    return listener


def _port(bind: str) -> int:
    return int(bind.rpartition(":")[2])


def _bound(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if port:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
    except OSError as ex:
        listener.close()
        raise ConfigError(
            f"FOLDLINE_WORKER_PORT={port}: 127.0.0.1:{port} cannot be bound ({ex.strerror});"
            " unset it to let the front pick a free port"
        ) from None
    return listener


def worker_env(
    config: FrontConfig,
    sid: str,
    front_url: str,
    token: str,
    env: Mapping[str, str],
    listen_fd: int,
) -> dict[str, str]:
    """The worker's whole environment (nothing else of the front's passes). What
    ``FOLDLINE_RUN_ENV`` names passes too, for the worker's runs: the front refused at boot
    every entry that could reach its own secrets (``adapters.settings.run_env``)."""
    kept = {
        name: value
        for name, value in env.items()
        if name in NAMED or name.startswith(PREFIXES) or config.run_env.passes(name)
    }
    kept.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return {
        **kept,
        # Its home is its state directory, which its runs see covered (adapters.services.sandbox).
        "HOME": str(config.worker_state(sid)),
        "FOLDLINE_STATE_DIR": str(config.worker_state(sid)),
        "FOLDLINE_WORKSPACE": str(config.workspace),
        "FOLDLINE_SHARED_VOLUME": "1",
        # Its runs share its uid: a user, pid and mount namespace keeps the log from them.
        "FOLDLINE_RUN_ISOLATION": "userns",
        "FOLDLINE_FRONT_URL": front_url,
        "FOLDLINE_FRONT_TOKEN": token,
        "FOLDLINE_FRONT_LISTEN_FD": str(listen_fd),
        **({"FOLDLINE_FRONT_NOTIFY": "1"} if config.notify else {}),
    }


def prepare_state_dir(config: FrontConfig) -> None:
    """At boot: the front's state directory, made if missing (on this machine's disk, never
    the session volume), and checked: the worker must traverse it to reach its own.

    Raises:
        ConfigError: one line naming the directory the run user cannot pass, and why.
    """
    try:
        config.state_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as ex:
        raise ConfigError(
            f"state directory {config.state_dir} (FOLDLINE_STATE_DIR) cannot be made: {ex.strerror}"
        ) from None
    state_access.check_as(config.state_dir, config.run_user)


def prepare_home(config: FrontConfig, sid: str) -> None:
    """The workers' directory and the session's in it, root's (0711), and in that its home
    and state directory, the run user's (0700). Nothing the worker reads lies where its runs
    can write: they see the state directory covered but for their own home in it, and the
    directory above it is root's."""
    config.state_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    for above in (config.workers_dir, config.worker_home(sid)):
        above.mkdir(mode=0o711, exist_ok=True)
        os.chown(above, 0, 0)  # the run user's before: its runs could write dotfiles there
        os.chmod(above, 0o711)
    state = config.worker_state(sid)
    state.mkdir(mode=0o700, exist_ok=True)
    os.chown(state, config.run_user.uid, config.run_user.gid)
    os.chmod(state, 0o700)


def worker_argv(config: FrontConfig, sid: str, status_fd: int) -> list[str]:
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        sys.executable,
        "-m",
        "adapters.front.view",
        str(status_fd),
        str(config.base),
        sid,
        str(config.workspace),
        "--",
        *as_user(
            config.run_user,
            [
                sys.executable,
                "-m",
                "adapters.cli",
                "serve",
                "--workspace",
                str(config.workspace),
                "--bind",
                f"127.0.0.1:{config.worker_port}",
            ],
        ),
    ]


def start(
    config: FrontConfig, sid: str, env: Mapping[str, str], listener: socket.socket
) -> tuple[subprocess.Popen[bytes], str]:
    """Start the chain with ``listener`` (``reserve_port``'s, its number in ``env``); the view
    helper's verdict (``ok`` or ``failed: why``) is returned once it is known, so a failed view
    is told apart from a worker that stopped later."""
    prepare_home(config, sid)
    reading, writing = os.pipe()
    try:
        process = subprocess.Popen(
            worker_argv(config, sid, writing),
            env=dict(env),
            cwd="/",
            # unshare, the view helper and setpriv exec in turn, and keep both open.
            pass_fds=(writing, listener.fileno()),
            stdin=subprocess.DEVNULL,
        )
    finally:
        os.close(writing)
    try:
        with os.fdopen(reading, "rb") as pipe:
            verdict = pipe.readline().decode(errors="replace").strip()
    except OSError as ex:
        verdict = f"failed: {ex}"
    return process, verdict or "failed: the view helper ended without a word"


def ping(config: FrontConfig) -> tuple[int, bytes] | None:
    """The worker's ``/ping`` answer, or None when there is none within 5 s
    (``FOLDLINE_FRONT_PING_S``)."""
    conn = http.client.HTTPConnection("127.0.0.1", config.worker_port, timeout=config.ping_within_s)
    try:
        conn.request("GET", "/ping")
        answer = conn.getresponse()
        return answer.status, answer.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
