"""Server settings from the environment and ``foldline serve`` flags (design.md §11).

Flags win over the environment. An invalid value is a boot error with a one-line explanation
(``ConfigError``), never a stack trace.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from adapters.settings import demo_agent
from adapters.settings.agents import Agents, default_agents, load_agents
from adapters.settings.card_file import DeployerCard, load_card
from adapters.settings.config_error import ConfigError
from adapters.settings.run_env import RunEnv, parse_run_env
from adapters.settings.shared_volume import TableReader, VolumeMode, decide
from engine.audit.note import Signer, parse_signer
from engine.domain.channel import Input
from engine.errors import InvalidArgument
from engine.storage import parse_target

__all__ = ["ConfigError", "RunUser", "ServerConfig", "load_config"]


LEASE_BUSY_TEXT = (
    "workspace is in use by another runtime session \u2014 call with the fixed runtime session id"
)

# The server's stop grace is bounded like a session stop's (ADR 0058).
MAX_SERVER_STOP_GRACE_S = 3600.0


def demo_runner() -> str:
    """The built-in demo agent: echoes the prompt slowly so a lifecycle can be watched."""
    return demo_agent.SCRIPT


@dataclass(frozen=True)
class ServerConfig:
    workspace: Path
    db: Path  # the SQLite log file (unused when ``db_url`` names a PostgreSQL log)
    db_url: str | None = None  # FOLDLINE_DB=postgresql://...: the log on PostgreSQL
    bind: str = "127.0.0.1:8080"
    workers: int = 2
    threads: int = 32
    runner: str = field(default_factory=demo_runner)
    runner_input: str = ""  # FOLDLINE_RUNNER_INPUT=lines: the default runner takes controls
    notify: str | None = None
    token: str | None = None
    sync: str = "full"
    resource_groups: Mapping[str, int] = field(default_factory=dict)
    lease_renew_s: float = 10.0
    lease_stale_s: float = 45.0
    lease_confirm_s: float = 2.0
    start_grace_s: float = 60.0
    transition_grace_s: float = 120.0
    job_timeout_s: float | None = None
    sync_wait_s: float = 600.0
    sse_keepalive_s: float = 15.0
    notify_timeout_s: float = 300.0
    output_flush_s: float = 0.1
    a2a_keepalive_s: float = 2.0
    public_url: str | None = None
    max_body: int = 1 << 20
    agents: Agents = field(default_factory=Agents)  # FOLDLINE_AGENTS_FILE; "" is the runner
    stop_grace_s: float = 120.0  # a graceful stop's default grace (ADR 0058)
    # The server's own graceful stop (SIGTERM): how long its runs have to end after their
    # finalize or SIGTERM (ADR 0058); gunicorn's graceful timeout is this plus a margin.
    server_stop_grace_s: float = 8.0
    # What that stop does with the runs left after the grace: cancel (the session's stop's
    # meaning, issue 43) or cut_off (they resume on the workspace's next server, a redeploy's).
    server_stop_lingering: str = "cancel"
    # Out of the runs' reach (ADR 0029): where the anchor lives, and who runs execute as.
    state_dir: Path = field(default_factory=lambda: default_state_dir(os.environ))
    run_user: RunUser | None = None  # None: runs keep the server's uid (a non-root server)
    run_isolation: str = "auto"  # namespace, modes, userns or auto (the boot check decides)
    # FOLDLINE_ACCESS (ADR 0064): what the default agent's runs may write.
    access: str = "workspace"  # workspace, readonly or full
    new_log: bool = False  # --new-log: start a new log where the anchor saw history
    # Shared-volume mode (ADR 0035): the log is opened only once this server holds the lease;
    # a non-holder answers lease-busy to everything but /ping and the agent card. Decided by
    # FOLDLINE_SHARED_VOLUME, else by where the log lies (ADR 0042): ``volume`` says how, and
    # whether a process judges it again before it first opens the log.
    shared_volume: bool = False
    volume: VolumeMode | None = None  # None: set directly (an embedding, a test)
    # FOLDLINE_PUSH_ALLOW: loopback or link-local hosts the server may call anyway (ADR 0039).
    push_allow: tuple[str, ...] = ()
    agent_card: DeployerCard | None = None  # FOLDLINE_AGENT_CARD: the deployer's card fields
    # FOLDLINE_CHECKPOINT_KEY (ADR 0040): the holder signs a checkpoint every N events or T s.
    checkpoint_key: Signer | None = None
    checkpoint_every: int = 1000
    checkpoint_interval_s: float = 60.0
    # FOLDLINE_RUN_ENV: the server's variables every run gets beyond the fixed allowlist.
    run_env: RunEnv = field(default_factory=RunEnv)

    @property
    def operator_token_file(self) -> Path:
        """Where the generated operator token lives (0600): beside the log, in the directory
        runs cannot reach; for a PostgreSQL log, in the state directory."""
        if self.db_url is not None:  # a 0700 directory of its own: the state dir is walked
            return self.state_dir / "private" / "operator-token"  # into by the run's home
        return self.db.with_name(self.db.name + ".token")

    def command_of(self, agent: str) -> str:
        """The command a job of ``agent`` runs (the default agent's is ``runner``)."""
        return self.runner if agent == "" else self.agents.command(agent)

    def input_of(self, agent: str) -> Input:
        """``lines`` if a job of ``agent`` takes controls while it runs (ADR 0038), else ""."""
        return "lines" if self.agents.input(agent) == "lines" else ""

    @property
    def log_target(self) -> str | Path:
        """What ``open_log`` opens: the PostgreSQL URL, else the file."""
        return self.db_url if self.db_url is not None else self.db

    @property
    def local_url(self) -> str:
        """The loopback base a run calls back on (``FOLDLINE_URL``)."""
        host, _, port = self.bind.rpartition(":")
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '[::]') else host}:{port}"


@dataclass(frozen=True)
class RunUser:
    """Who a run executes as when the server is root (``FOLDLINE_RUN_USER``)."""

    uid: int
    gid: int
    name: str  # as configured, for messages

    @property
    def is_root(self) -> bool:
        return self.uid == 0


def default_state_dir(env: Mapping[str, str]) -> Path:
    """``FOLDLINE_STATE_DIR``, else ``/var/lib/foldline`` for root, else
    ``$XDG_STATE_HOME/foldline`` (``~/.local/state/foldline``)."""
    if env.get("FOLDLINE_STATE_DIR"):
        return Path(env["FOLDLINE_STATE_DIR"]).resolve()
    if os.geteuid() == 0:
        return Path("/var/lib/foldline")
    xdg = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg).resolve() / "foldline"


def parse_run_user(text: str | None) -> RunUser | None:
    """``FOLDLINE_RUN_USER``: a user name or ``uid:gid``; default ``1000:1000`` when the server
    is root, and no switch at all when it is not (it could not switch)."""
    if os.geteuid() != 0:
        if text:
            raise ConfigError(
                f"FOLDLINE_RUN_USER={text!r}: only a server running as root can run jobs as"
                " another user"
            )
        return None
    text = text or "1000:1000"
    uid_text, sep, gid_text = text.partition(":")
    if sep:
        if not (uid_text.isdigit() and gid_text.isdigit()):
            raise ConfigError(f"FOLDLINE_RUN_USER={text!r}: expected a user name or uid:gid")
        return RunUser(int(uid_text), int(gid_text), text)
    try:
        entry = pwd.getpwnam(text)
    except KeyError:
        raise ConfigError(f"FOLDLINE_RUN_USER={text!r}: no such user") from None
    return RunUser(entry.pw_uid, entry.pw_gid, text)


def parse_access(text: str | None) -> str:
    """``FOLDLINE_ACCESS``: ``workspace`` (unset or empty), ``readonly`` or ``full``.

    Raises:
        ConfigError: any other value.
    """
    value = text or "workspace"
    if value not in ("workspace", "readonly", "full"):
        raise ConfigError(f"FOLDLINE_ACCESS={value!r}: expected workspace, readonly or full")
    return value


def parse_number(name: str, text: str, kind: type = float, minimum: float = 0.0) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r}: expected a {kind.__name__}") from None
    if value <= minimum:
        raise ConfigError(f"{name}={text!r}: must be greater than {minimum:g}")
    return value  # type: ignore[no-any-return]


def _flag(name: str, text: str) -> bool:
    """A yes/no setting: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={text!r}: expected 1 or 0 (true/false, yes/no, on/off)")


def _setting(name: str, text: str | None) -> bool | None:
    """A yes/no setting that may be left unset (None): unset or empty decides otherwise."""
    return None if text is None or not text.strip() else _flag(name, text)


def _groups(text: str) -> dict[str, int]:
    """``FOLDLINE_RESOURCE_GROUPS="cpu=4,gpu=1"``."""
    groups = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, units = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"FOLDLINE_RESOURCE_GROUPS: {item!r} is not name=units")
        groups[name] = int(parse_number(f"FOLDLINE_RESOURCE_GROUPS[{name}]", units, int))
    return groups


def load_signer(path: str) -> Signer:
    """The checkpoint signer key ``foldline keygen`` wrote at ``path``.

    Raises:
        ConfigError: the file cannot be read or is not a signer key.
    """
    where = f"FOLDLINE_CHECKPOINT_KEY {path}"
    try:
        return parse_signer(Path(path).read_bytes().decode("utf-8"))
    except OSError as ex:
        raise ConfigError(f"{where}: cannot be read ({ex.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    except InvalidArgument as ex:
        raise ConfigError(f"{where}: {ex.message}") from None


def parse_bind(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"bind {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    return text


def check_places(config: ServerConfig) -> None:
    """The log and the state directory must be out of the runs' reach (ADR 0029), and a
    shared-volume server's log is a SQLite file (ADR 0035).

    Raises:
        ConfigError: the log's directory is the workspace itself, the state directory
            lies in the workspace, or FOLDLINE_SHARED_VOLUME=1 names a PostgreSQL log.
    """
    if config.db_url is None and config.db.parent == config.workspace:
        raise ConfigError(
            f"log {config.db}: the log needs a directory of its own, not the workspace itself"
            " (runs own the workspace and could reach it)"
        )
    if config.state_dir.is_relative_to(config.workspace):
        raise ConfigError(
            f"FOLDLINE_STATE_DIR={config.state_dir} lies in the workspace: the anchor must be"
            " out of the runs' reach"
        )
    if config.shared_volume and config.db_url is not None:
        raise ConfigError(
            "FOLDLINE_SHARED_VOLUME=1 is for a SQLite log on a shared filesystem; a PostgreSQL"
            " log is shared by its database server: unset it"
        )


def _push_allow(text: str) -> tuple[str, ...]:
    """``FOLDLINE_PUSH_ALLOW``: comma-separated host names, addresses or networks."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    for item in items:
        if "/" in item or item[:1].isdigit() or ":" in item:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ConfigError(
                    f"FOLDLINE_PUSH_ALLOW: {item!r} is neither an address nor a network"
                ) from None
    return items


def load_config(
    env: Mapping[str, str] | None = None,
    *,
    workspace: str | None = None,
    bind: str | None = None,
    workers: int | None = None,
    threads: int | None = None,
    db: str | None = None,
    mount_table: TableReader | None = None,
) -> ServerConfig:
    """Settings from ``env`` (default: the process environment), then flags (``db`` is
    ``--db``). ``mount_table`` reads the mount table the shared-volume mode is decided from
    (default: this process's).

    Raises:
        ConfigError: a value is invalid (the message names the setting).
    """
    env = os.environ if env is None else env
    root = Path(workspace or env.get("FOLDLINE_WORKSPACE") or ".").resolve()
    if not root.is_dir():
        raise ConfigError(f"workspace {str(root)!r} is not a directory")
    location = db or env.get("FOLDLINE_DB") or ""
    db_url = location if parse_target(location).remote else None
    log = Path(location) if location and db_url is None else root / ".foldline" / "foldline.db"
    sync = env.get("FOLDLINE_SYNC", "full")
    if sync not in ("full", "normal"):
        raise ConfigError(f"FOLDLINE_SYNC={sync!r}: expected full or normal")
    config = ServerConfig(workspace=root, db=log.resolve(), db_url=db_url, sync=sync)
    updates: dict[str, object] = {
        "bind": parse_bind(bind or env.get("FOLDLINE_BIND") or config.bind),
        "runner": env.get("FOLDLINE_RUNNER") or config.runner,
        "runner_input": env.get("FOLDLINE_RUNNER_INPUT", ""),
        "server_stop_lingering": env.get("FOLDLINE_SERVER_STOP_LINGERING") or "cancel",
        "notify": env.get("FOLDLINE_NOTIFY") or None,
        "token": env.get("FOLDLINE_TOKEN") or None,
        "resource_groups": _groups(env.get("FOLDLINE_RESOURCE_GROUPS", "")),
        "public_url": env.get("FOLDLINE_PUBLIC_URL") or None,
        "state_dir": default_state_dir(env),
        "run_user": parse_run_user(env.get("FOLDLINE_RUN_USER")),
        "run_isolation": env.get("FOLDLINE_RUN_ISOLATION") or "auto",
        "access": parse_access(env.get("FOLDLINE_ACCESS")),
        "push_allow": _push_allow(env.get("FOLDLINE_PUSH_ALLOW", "")),
        "run_env": parse_run_env(env.get("FOLDLINE_RUN_ENV", ""), env.get("FOLDLINE_NOTIFY")),
    }
    numbers = {
        "lease_renew_s": "FOLDLINE_LEASE_RENEW_S",
        "lease_confirm_s": "FOLDLINE_LEASE_CONFIRM_S",
        "start_grace_s": "FOLDLINE_START_GRACE_S",
        "transition_grace_s": "FOLDLINE_TRANSITION_GRACE_S",
        "lease_stale_s": "FOLDLINE_LEASE_STALE_S",
        "job_timeout_s": "FOLDLINE_JOB_TIMEOUT_S",
        "sync_wait_s": "FOLDLINE_SYNC_WAIT_S",
        "sse_keepalive_s": "FOLDLINE_SSE_KEEPALIVE_S",
        "notify_timeout_s": "FOLDLINE_NOTIFY_TIMEOUT_S",
        "a2a_keepalive_s": "FOLDLINE_A2A_KEEPALIVE_S",
        "stop_grace_s": "FOLDLINE_STOP_GRACE_S",
        "server_stop_grace_s": "FOLDLINE_SERVER_STOP_GRACE_S",
        "checkpoint_interval_s": "FOLDLINE_CHECKPOINT_INTERVAL_S",
    }
    for attr, name in numbers.items():
        if env.get(name):
            updates[attr] = parse_number(name, env[name])
    for attr, name, flag in (
        ("workers", "FOLDLINE_WORKERS", workers),
        ("threads", "FOLDLINE_THREADS", threads),
        ("checkpoint_every", "FOLDLINE_CHECKPOINT_EVERY", None),
    ):
        if flag is not None:
            updates[attr] = int(parse_number(f"--{attr}", str(flag), int))
        elif env.get(name):
            updates[attr] = int(parse_number(name, env[name], int))
    config = replace(config, **updates)  # type: ignore[arg-type]
    agents_file = env.get("FOLDLINE_AGENTS_FILE")
    config = replace(
        config,
        agents=load_agents(agents_file, config.runner, config.resource_groups, config.runner_input)
        if agents_file
        else default_agents(config.runner, config.runner_input),
    )
    if env.get("FOLDLINE_AGENT_CARD"):
        config = replace(config, agent_card=load_card(env["FOLDLINE_AGENT_CARD"]))
    if env.get("FOLDLINE_CHECKPOINT_KEY"):
        config = replace(config, checkpoint_key=load_signer(env["FOLDLINE_CHECKPOINT_KEY"]))
    setting = _setting("FOLDLINE_SHARED_VOLUME", env.get("FOLDLINE_SHARED_VOLUME"))
    volume = decide(setting, None if config.db_url else config.db, mount_table)
    config = replace(config, shared_volume=volume.on, volume=volume)
    check_places(config)
    if config.runner_input not in ("", "lines"):
        raise ConfigError(f"FOLDLINE_RUNNER_INPUT={config.runner_input!r}: expected lines or empty")
    if config.run_isolation not in ("auto", "namespace", "modes", "userns"):
        raise ConfigError(
            f"FOLDLINE_RUN_ISOLATION={config.run_isolation!r}: expected auto, namespace, modes"
            " or userns"
        )
    if config.server_stop_lingering not in ("cancel", "cut_off"):
        raise ConfigError(
            f"FOLDLINE_SERVER_STOP_LINGERING={config.server_stop_lingering!r}: expected cancel"
            " or cut_off"
        )
    if config.a2a_keepalive_s > 2:
        raise ConfigError("FOLDLINE_A2A_KEEPALIVE_S must be at most 2: A2A clients wait 5 s")
    if config.lease_renew_s >= config.lease_stale_s:
        raise ConfigError("FOLDLINE_LEASE_RENEW_S must be smaller than FOLDLINE_LEASE_STALE_S")
    if not 0 <= config.server_stop_grace_s <= MAX_SERVER_STOP_GRACE_S:
        raise ConfigError(
            f"FOLDLINE_SERVER_STOP_GRACE_S must be 0 to {MAX_SERVER_STOP_GRACE_S:g} s"
        )
    return config
