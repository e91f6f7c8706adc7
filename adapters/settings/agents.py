"""``FOLDLINE_AGENTS_FILE``: named agents (roles) and the session limits, in TOML.

```toml
[agents.worker]
command = "my-agent --print"     # run with sh -c, like FOLDLINE_RUNNER
mode = "read-only"               # or "workspace-write" (needs a write_scope per job)
input = "lines"                  # takes controls on stdin while it runs (ADR 0038); default none
max_active = 8                   # across all sessions
resource_group = "cpu"
units = 1
can_spawn = []
max_children = 4
reject_ancestor_role = false
controls = { sub = ["cancel", "pause", "continue", "steer", "inspect", "fork"] }  # ADR 0057
result_visibility = "descendants"  # or "session": its runs read every job of their session
output_schema = "worker.schema.json"  # a JSON Schema: a file (beside this one) or inline table
contract = "warn"                # or "strict": an invalid final reply ends the job error
[limits]
max_depth = 3
max_active_agents = 16           # per session
max_active_writers = 2           # per session
```

``controls`` names, per descendant agent (``"*"`` any, ``""`` the default one), the controls a
live run of this agent may use on its descendants (``engine.domain.agents.CONTROLS``); without
it, ``DEFAULT_GRANTS`` on every descendant. The default agent (name ``""``) is
``FOLDLINE_RUNNER``. Any mistake is a ``ConfigError`` with
one line naming the file and the key, so the server does not boot on a half-read file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from adapters.settings.config_error import ConfigError
from adapters.settings.contracts import load_schema
from engine.domain.agents import (
    CONTROLS,
    DEFAULT_AGENT,
    AgentPolicy,
    Contract,
    Mode,
    Visibility,
)

NAME = r"[A-Za-z0-9_.-]{1,64}"


class _AgentIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    command: str
    mode: Mode = Mode.READ_ONLY
    input: Literal["", "lines"] = ""
    resource_group: str | None = None
    units: Any = 1
    max_active: Any = None
    can_spawn: list[str] = []
    max_children: Any = None
    reject_ancestor_role: bool = False
    controls: dict[str, list[str]] | None = None
    result_visibility: Visibility = Visibility.DESCENDANTS
    output_schema: str | dict[str, Any] | None = None
    contract: Contract = Contract.WARN


class _LimitsIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    max_depth: Any = 8
    max_active_agents: Any = None
    max_active_writers: Any = None


class _FileIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    agents: dict[str, _AgentIn] = {}
    limits: _LimitsIn = msgspec.field(default_factory=_LimitsIn)


@dataclass(frozen=True)
class Agents:
    """What the server runs for each agent, and the policies the rules check."""

    commands: Mapping[str, str] = field(default_factory=dict)
    # "lines": the agent's runs take controls on stdin while they run (ADR 0038).
    inputs: Mapping[str, str] = field(default_factory=dict)
    policies: Mapping[str, AgentPolicy] = field(default_factory=lambda: {"": DEFAULT_AGENT})
    max_depth: int = 8
    max_active_agents: int | None = None
    max_active_writers: int | None = None
    # Each agent's output schema (ADR 0065), checked at boot; absent: no contract.
    schemas: Mapping[str, dict[str, Any]] = field(default_factory=dict)

    def command(self, agent: str) -> str:
        return self.commands[agent]

    def input(self, agent: str) -> str:
        return self.inputs.get(agent, "")


def _count(where: str, value: Any, optional: bool = True) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise ConfigError(f"{where}: expected a whole number from 1 to 100000, got {value!r}")
    return value


def _controls(
    where: str, raw: dict[str, list[str]] | None, agents: Mapping[str, Any]
) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    """An agent's ``controls`` table as its policy holds it (ADR 0057), every target agent
    and control name checked."""
    if raw is None:
        return None
    granted = []
    for target, names in raw.items():
        if target not in ("*", "") and target not in agents:
            raise ConfigError(f"{where}: unknown agent {target!r}")
        unknown = [n for n in names if n not in CONTROLS]
        if unknown:
            raise ConfigError(
                f"{where}.{target!r}: unknown control {unknown[0]!r} (known: {', '.join(CONTROLS)})"
            )
        granted.append((target, tuple(dict.fromkeys(names))))
    return tuple(granted)


def default_agents(runner: str, runner_input: str = "") -> Agents:
    return Agents(commands={"": runner}, inputs={"": runner_input})


def load_agents(
    path: str, runner: str, groups: Mapping[str, int], runner_input: str = ""
) -> Agents:
    """Read ``path`` (TOML); ``runner`` is the default agent's command, ``runner_input`` its
    input (``FOLDLINE_RUNNER_INPUT``).

    Raises:
        ConfigError: the file is missing, not TOML, or declares something invalid.
    """
    where = f"FOLDLINE_AGENTS_FILE {path}"
    try:
        raw = tomllib.loads(Path(path).read_text())
    except OSError as ex:
        raise ConfigError(f"{where}: cannot be read ({ex.strerror or ex})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as ex:
        raise ConfigError(f"{where}: not valid TOML ({ex})".replace("\n", " ")) from None
    try:
        parsed = msgspec.convert(raw, _FileIn)
    except msgspec.ValidationError as ex:
        raise ConfigError(f"{where}: {ex}".replace("\n", " ")) from None
    commands, policies = {"": runner}, {"": DEFAULT_AGENT}
    inputs = {"": runner_input}
    schemas: dict[str, dict[str, Any]] = {}
    for name, spec in parsed.agents.items():
        at = f"{where}: agents.{name}"
        if not re.fullmatch(NAME, name):
            raise ConfigError(f"{at}: a name is 1 to 64 letters, digits, '_', '.' or '-'")
        if not spec.command.strip():
            raise ConfigError(f"{at}.command: must not be empty")
        if spec.resource_group is not None and spec.resource_group not in groups:
            raise ConfigError(
                f"{at}.resource_group: {spec.resource_group!r} is not in FOLDLINE_RESOURCE_GROUPS"
            )
        unknown = [n for n in spec.can_spawn if n not in parsed.agents]
        if unknown:
            raise ConfigError(f"{at}.can_spawn: unknown agent {unknown[0]!r}")
        if spec.output_schema is not None:
            schemas[name] = load_schema(f"{at}.output_schema", spec.output_schema, Path(path))
        commands[name] = spec.command
        inputs[name] = spec.input
        policies[name] = AgentPolicy(
            name=name,
            mode=spec.mode,
            resource_group=spec.resource_group,
            units=_count(f"{at}.units", spec.units, optional=False) or 1,
            max_active=_count(f"{at}.max_active", spec.max_active),
            can_spawn=tuple(spec.can_spawn),
            max_children=_count(f"{at}.max_children", spec.max_children),
            reject_ancestor_role=spec.reject_ancestor_role,
            controls=_controls(f"{at}.controls", spec.controls, parsed.agents),
            result_visibility=spec.result_visibility,
            has_contract=spec.output_schema is not None,
            contract=spec.contract,
        )
    limits = parsed.limits
    return Agents(
        commands=commands,
        inputs=inputs,
        policies=policies,
        max_depth=_count(f"{where}: limits.max_depth", limits.max_depth, optional=False) or 8,
        max_active_agents=_count(f"{where}: limits.max_active_agents", limits.max_active_agents),
        max_active_writers=_count(f"{where}: limits.max_active_writers", limits.max_active_writers),
        schemas=schemas,
    )
