"""A workspace holding agent scripts, and the agents file that declares them, for server tests."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def python_agent(script: str) -> str:
    """The command that runs ``script``, a file of the workspace, with this interpreter."""
    return f"{shlex.quote(sys.executable)} {script}"


def workspace_with_agents(
    tmp_path: Path,
    scripts: Mapping[str, str],
    commands: Mapping[str, str],
    can_spawn: Mapping[str, Sequence[str]] | None = None,
    controls: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
) -> tuple[Path, Path]:
    """``tmp_path/ws`` with ``scripts`` written into it, and an agents file declaring each of
    ``commands`` (whom it may spawn, and the controls its runs are granted on each target
    agent, ADR 0057): ``(workspace, agents_file)``."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for name, text in scripts.items():
        (workspace / name).write_text(text)
    lines = []
    for agent, command in commands.items():
        lines += [f"[agents.{agent}]", f"command = {json.dumps(command)}"]
        if can_spawn and agent in can_spawn:
            lines.append(f"can_spawn = {json.dumps(list(can_spawn[agent]))}")
        if controls and agent in controls:
            table = ", ".join(
                f"{json.dumps(target)} = {json.dumps(list(granted))}"
                for target, granted in controls[agent].items()
            )
            lines.append(f"controls = {{ {table} }}")
    agents = tmp_path / "agents.toml"
    agents.write_text("\n".join(lines) + "\n")
    return workspace, agents
