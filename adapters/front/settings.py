"""The front's settings and request rules: which paths it serves and which session ids it takes.

The front reads only what it needs from the environment; ``foldline serve``'s own settings are
for the worker, which gets them through a named allowlist (``adapters.front.worker``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from adapters.settings.config import (
    RunUser,
    default_state_dir,
    parse_access,
    parse_bind,
    parse_number,
    parse_run_user,
)
from adapters.settings.config_error import ConfigError
from adapters.settings.run_env import RunEnv, parse_run_env

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
# 33 to 255 characters: the id is a directory name (NAME_MAX 255), and a leading dot cannot
# match, so ``.template`` and ``.tmp-*`` are never served.
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{32,254}")
EXACT_PATHS = ("/ping", "/invocations", "/", "/.well-known/agent-card.json")
PREFIXES = ("/v1", "/console")
READY_WITHIN_S = 30.0  # the worker's /ready, else 503 for good (FOLDLINE_FRONT_READY_S)
PING_WITHIN_S = 5.0  # the worker's /ping answer, else HealthyBusy (FOLDLINE_FRONT_PING_S)
COMMAND_WITHIN_S = 30.0  # each mount command of the view setup
STOP_WITHIN_S = 30.0  # the front's notify work at a stop, then SIGKILL


def served(path: str) -> bool:
    """Whether ``path`` (no query) is one the front proxies (``/ping`` is its own)."""
    return path in EXACT_PATHS or any(
        path == prefix or path.startswith(prefix + "/") for prefix in PREFIXES
    )


def session_id_ok(value: str | None) -> bool:
    return value is not None and SESSION_ID.fullmatch(value) is not None


@dataclass(frozen=True)
class FrontConfig:
    base: Path  # FOLDLINE_SESSION_BASE: the mount holding every session's directory
    workspace: Path  # the worker's fixed workspace path (FOLDLINE_WORKSPACE, default /workspace)
    bind: str  # the front's address
    # The worker's loopback port (FOLDLINE_WORKER_PORT); 0: one the kernel finds free at boot
    # (``adapters.front.worker.reserve_port``), so fronts on one host never collide.
    worker_port: int
    run_user: RunUser
    state_dir: Path  # the front's; the worker's home and state live under it
    notify: str | None  # FOLDLINE_NOTIFY: run by the front, never given to the worker
    notify_timeout_s: float = 300.0  # FOLDLINE_NOTIFY_TIMEOUT_S
    ready_within_s: float = READY_WITHIN_S  # FOLDLINE_FRONT_READY_S
    ping_within_s: float = PING_WITHIN_S  # FOLDLINE_FRONT_PING_S
    # FOLDLINE_RUN_ENV: checked here against the front's own notify hook, forwarded to the
    # worker with the variables it names, so that they reach the worker's runs.
    run_env: RunEnv = field(default_factory=RunEnv)

    @property
    def template(self) -> Path:
        return self.base / ".template"

    @property
    def worker_url(self) -> str:
        return f"http://127.0.0.1:{self.worker_port}"

    @property
    def workers_dir(self) -> Path:
        """Root's (0711): one directory per session directory this host served."""
        return self.state_dir / "front-worker"

    def worker_home(self, sid: str) -> Path:
        """Root's (0711): it holds ``worker_state(sid)``. Keyed by the session's directory on
        this host (``<base>/<sid>``), not by the worker's view of it (the workspace path,
        the same for every session): each session's anchor is its own, and a session whose
        log vanished still finds its anchor."""
        return self.workers_dir / session_key(self.base / sid)

    def worker_state(self, sid: str) -> Path:
        """The worker's home and ``FOLDLINE_STATE_DIR`` (the log's anchor, its runs' homes)."""
        return self.worker_home(sid) / "state"


def session_key(session_dir: Path) -> str:
    """A session directory's name among the workers' state directories: 16 hex of the SHA-256
    of its path (an id can be 255 characters, the directory's name must stay short)."""
    return hashlib.sha256(os.fsencode(session_dir)).hexdigest()[:16]


def load_front_config(
    env: Mapping[str, str] | None = None,
    *,
    workspace: str | None = None,
    bind: str | None = None,
) -> FrontConfig:
    """Settings from ``env``, then flags.

    Raises:
        ConfigError: not root, a missing base, a base overlapping the workspace, a bad value.
    """
    env = os.environ if env is None else env
    if os.geteuid() != 0:
        raise ConfigError("foldline front needs root: it mounts the session's directory")
    base_text = env.get("FOLDLINE_SESSION_BASE") or ""
    if not base_text.startswith("/"):
        raise ConfigError(
            f"FOLDLINE_SESSION_BASE={base_text!r}: expected the absolute path of the mount"
            " holding the sessions' directories"
        )
    base = Path(os.path.normpath(base_text))
    ws = Path(os.path.normpath(workspace or env.get("FOLDLINE_WORKSPACE") or "/workspace"))
    if not ws.is_absolute():
        raise ConfigError(f"workspace {str(ws)!r}: expected an absolute path")
    if base == ws or base.is_relative_to(ws) or ws.is_relative_to(base):
        raise ConfigError(
            f"FOLDLINE_SESSION_BASE={base} overlaps the worker's workspace {ws}: the view"
            " setup unmounts the base under it"
        )
    front_bind = parse_bind(bind or env.get("FOLDLINE_BIND") or "0.0.0.0:8080")
    port_text = env.get("FOLDLINE_WORKER_PORT") or "0"
    if not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise ConfigError(
            f"FOLDLINE_WORKER_PORT={port_text!r}: expected a port number (unset: a free one)"
        )
    if int(port_text) and int(front_bind.rpartition(":")[2]) == int(port_text):
        raise ConfigError(f"bind {front_bind}: port {port_text} is the worker's")
    parse_access(env.get("FOLDLINE_ACCESS"))  # the workers' setting, refused at the front's boot
    user = parse_run_user(env.get("FOLDLINE_RUN_USER"))
    if user is None or user.is_root:
        raise ConfigError("FOLDLINE_RUN_USER: the worker must run as a user other than root")
    return FrontConfig(
        base=base,
        workspace=ws,
        bind=front_bind,
        worker_port=int(port_text),
        run_user=user,
        state_dir=default_state_dir(env),
        notify=env.get("FOLDLINE_NOTIFY") or None,
        run_env=parse_run_env(env.get("FOLDLINE_RUN_ENV", ""), env.get("FOLDLINE_NOTIFY")),
        notify_timeout_s=parse_number(
            "FOLDLINE_NOTIFY_TIMEOUT_S", env.get("FOLDLINE_NOTIFY_TIMEOUT_S") or "300"
        ),
        ready_within_s=parse_number(
            "FOLDLINE_FRONT_READY_S", env.get("FOLDLINE_FRONT_READY_S") or str(READY_WITHIN_S)
        ),
        ping_within_s=parse_number(
            "FOLDLINE_FRONT_PING_S", env.get("FOLDLINE_FRONT_PING_S") or str(PING_WITHIN_S)
        ),
    )
