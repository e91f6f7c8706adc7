"""The agent's environment: the server's variables a run gets beyond the fixed allowlist.

``FOLDLINE_RUN_ENV`` adds to ``adapters.system.processes.ENV_ALLOWLIST``: exact variable names and
``PREFIX_*`` patterns, separated by commas and/or whitespace. A variable of the server's
environment that one of them matches is copied into every run's environment, under what the
server sets for the run itself (its own ``FOLDLINE_*`` values, the sandbox's ``HOME``): those
always win. The image sets the source system's list (the runtime role's AWS variables and the
OTEL ones); ``foldline serve`` alone passes nothing beyond the allowlist unless told to. The
git commands foldline runs itself (``adapters.system.gitwork``) and the notify hook
(``adapters.services.notify``) keep their own environments.

What may never pass is refused at boot, by rule rather than by what happens to be set now:

- an entry that could match a name starting with ``FOLDLINE_`` (the operator token, the notify
  hook, the front's token, the checkpoint key and every other setting live there; runs get
  their own ``FOLDLINE_*`` values from the server): an exact ``FOLDLINE_...`` name, or a
  pattern whose prefix starts with ``FOLDLINE_`` or is the start of it (``F*``, ``FOLDLINE*``);
- an entry that could match a notify channel's secrets: the families the source system's
  notify hook posts with (``FEISHU_``, ``LARK_``, ``SLACK_``, ``TELEGRAM_``, ``WECOM_``, by the
  same overlap rule), and every variable the ``FOLDLINE_NOTIFY`` command names (``$NAME`` or
  ``${NAME}``);
- a malformed entry: a bare ``*``, a ``*`` anywhere but at the end, a name that is not
  ``[A-Za-z_][A-Za-z0-9_]*``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from adapters.settings.config_error import ConfigError
from adapters.system.processes import ENV_ALLOWLIST

SETTING = "FOLDLINE_RUN_ENV"
# The image's default (Dockerfile): what the source system's agents get on AgentCore.
SOURCE_LIST = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_CONTAINER_*",
    "OTEL_*",
    "AGENT_OBSERVABILITY_*",
)
OWN_PREFIX = "FOLDLINE_"
# foldline's secrets, named in a refusal so that the operator sees what was at stake.
SECRETS = {
    "FOLDLINE_TOKEN": "the operator token",
    "FOLDLINE_NOTIFY": "the notify hook",
    "FOLDLINE_FRONT_TOKEN": "the front's token",
    "FOLDLINE_CHECKPOINT_KEY": "the checkpoint key",
}
# Where the source's notify hook keeps its channels' credentials (Feishu is Lark abroad).
CHANNEL_PREFIXES = ("FEISHU_", "LARK_", "SLACK_", "TELEGRAM_", "WECOM_")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class RunEnv:
    """A parsed ``FOLDLINE_RUN_ENV``: exact names and prefixes, none of them refused."""

    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    @property
    def entries(self) -> list[str]:
        """The setting as it reads, normalized (for the boot line)."""
        return sorted(self.names) + [prefix + "*" for prefix in self.prefixes]

    def passes(self, name: str) -> bool:
        return name in self.names or name.startswith(self.prefixes)

    def pick(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The variables of ``environ`` this lets through."""
        return {name: value for name, value in environ.items() if self.passes(name)}

    def base(self, environ: Mapping[str, str]) -> dict[str, str]:
        """A run's environment before the server's own values: the fixed allowlist plus what
        this lets through, both from ``environ`` (the server's)."""
        kept = {name: environ[name] for name in ENV_ALLOWLIST if name in environ}
        return {**kept, **self.pick(environ)}


def _could_reach(prefix: str | None, name: str, family: str) -> bool:
    """Whether an exact ``name`` (``prefix`` None) or ``prefix*`` could match a name of
    ``family`` (a prefix): the two overlap when either starts with the other."""
    if prefix is None:
        return name.startswith(family)
    return prefix.startswith(family) or family.startswith(prefix)


def _refusal(entry: str, prefix: str | None, notify_names: set[str]) -> str | None:
    """Why ``entry`` may not pass, or None."""

    def matches(name: str) -> bool:
        return name == entry if prefix is None else name.startswith(prefix)

    if _could_reach(prefix, entry, OWN_PREFIX):
        named = [f"{name} ({what})" for name, what in SECRETS.items() if matches(name)]
        at_stake = ", ".join(named) if named else "foldline's own variables (FOLDLINE_*)"
        return (
            f"{entry!r} would pass {at_stake}; runs get their FOLDLINE_* values from the server"
            " only"
        )
    channels = [family + "*" for family in CHANNEL_PREFIXES if _could_reach(prefix, entry, family)]
    if channels:
        return f"{entry!r} would pass a notify channel's secrets ({', '.join(channels)})"
    hooks = sorted(name for name in notify_names if matches(name))
    if hooks:
        return f"{entry!r} would pass {', '.join(hooks)}, which FOLDLINE_NOTIFY uses"
    return None


def parse_run_env(text: str, notify: str | None = None) -> RunEnv:
    """``FOLDLINE_RUN_ENV``: names and ``PREFIX_*`` patterns separated by commas and/or
    whitespace; empty is nothing beyond the allowlist. ``notify`` is the ``FOLDLINE_NOTIFY``
    command of the same process: the variables it names are the hook's secrets.

    Raises:
        ConfigError: a malformed entry, or one that could pass a secret (see the module
            docstring), named with what it would pass.
    """
    notify_names = set(_REFERENCE.findall(notify or ""))
    names: set[str] = set()
    prefixes: list[str] = []
    for entry in re.split(r"[\s,]+", text.strip()):
        if not entry:
            continue
        if entry == "*":
            raise ConfigError(
                f"{SETTING}: '*' alone would pass the server's whole environment, the operator"
                " token among it: name the variables, or PREFIX_* patterns"
            )
        prefix = entry[:-1] if entry.endswith("*") else None
        if _NAME.fullmatch(entry if prefix is None else prefix) is None:
            raise ConfigError(
                f"{SETTING}: {entry!r} is neither a variable name nor a PREFIX_* pattern"
                " (one '*', at the end)"
            )
        why = _refusal(entry, prefix, notify_names)
        if why is not None:
            raise ConfigError(f"{SETTING}: {why}")
        if prefix is None:
            names.add(entry)
        elif prefix not in prefixes:
            prefixes.append(prefix)
    return RunEnv(frozenset(names), tuple(prefixes))
