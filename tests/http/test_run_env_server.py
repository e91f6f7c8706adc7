"""The agent's environment through a real server (issue 40): a runner that prints its
environment, started with the runtime's AWS and OTEL variables, an unrelated one and the
server's secrets set. With ``FOLDLINE_RUN_ENV`` the source's list, exactly the named ones
arrive, for a plain run and a live-channel run alike; without it, none of them; a pattern that
could pass a secret stops the boot with one line."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters.settings.run_env import SOURCE_LIST, parse_run_env
from adapters.system.processes import ENV_ALLOWLIST
from engine.audit.note import generate_signer
from tests.support import runners
from tests.support.cli import foldline
from tests.support.server import Server, serve

pytestmark = pytest.mark.server

# Reads the prompt's first line (a live-channel run's stdin stays open), prints its environment.
PRINTER = "import json, os, sys; sys.stdin.readline(); print(json.dumps(dict(os.environ)))"
# What the server tells a run about itself, and what sh exports on its own.
RUN_OWN = runners.RUN_OWN | {"FOLDLINE_INPUT"} | runners.SHELL_OWN
RUNTIME = {
    "AWS_REGION": "eu-central-1",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://169.254.170.2/v2/credentials/run-env-test",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
}
SECRETS = {
    "UNRELATED_SETTING": "not for the agent",
    "SLACK_BOT_TOKEN": "xoxb-channel-secret",
    "FOLDLINE_NOTIFY": "cat >/dev/null",
}


def _workspace(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace and an agents file: the default runner prints its environment, and so does
    ``talker``, whose run takes controls on its stdin (the live channel, ADR 0038)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "printenv.py").write_text(PRINTER + "\n")
    agents = tmp_path / "agents.toml"
    command = f"{shlex.quote(sys.executable)} printenv.py"
    agents.write_text(f'[agents.talker]\ncommand = {json.dumps(command)}\ninput = "lines"\n')
    return workspace, agents


def _env_of_run(server: Server, body: dict[str, Any]) -> dict[str, str]:
    status, answer = server.invoke(body, timeout=60)
    assert status == 200 and answer["status"] == "ok", answer
    printed: dict[str, str] = json.loads(answer["result"])
    return printed


def _passed(printed: dict[str, str]) -> set[str]:
    """The names a run got from the server's environment."""
    return set(printed) - RUN_OWN


def test_runs_get_exactly_the_named_variables_and_no_secret(tmp_path: Path) -> None:
    workspace, agents = _workspace(tmp_path)
    key = tmp_path / "checkpoint.key"
    key.write_text(generate_signer("example.com/run-env-test").text() + "\n")
    env = {
        **RUNTIME,
        **SECRETS,
        "FOLDLINE_RUNNER": f"{shlex.quote(sys.executable)} printenv.py",
        "FOLDLINE_AGENTS_FILE": str(agents),
        "FOLDLINE_CHECKPOINT_KEY": str(key),
        "FOLDLINE_RUN_ENV": ",".join(SOURCE_LIST),
    }
    wanted = parse_run_env(env["FOLDLINE_RUN_ENV"])
    # Exactly what the allowlist and the source's list name of the server's whole environment.
    expected = {
        name
        for name in {**os.environ, **env}
        if name in ENV_ALLOWLIST
        or name in SOURCE_LIST
        or name.startswith(("AWS_CONTAINER_", "OTEL_", "AGENT_OBSERVABILITY_"))
    }
    with serve(workspace, env) as server:
        assert server.process.stdout is not None
        boot = json.loads(server.process.stdout.readline())
        assert boot["run_env"] == wanted.entries
        plain = _env_of_run(server, {"prompt": "plain run"})
        live = _env_of_run(server, {"prompt": "live run", "agent": "talker"})
    # The evidence, shown with -s.
    print("\nboot run_env:", json.dumps(boot["run_env"]))
    for name in sorted(plain):
        if name.startswith(("AWS_", "OTEL_", "UNRELATED_", "SLACK_", "FOLDLINE_")):
            shown = "<run token>" if name == "FOLDLINE_RUN_TOKEN" else plain[name]
            print(f"run env: {name}={shown}")
    kept_out = (*SECRETS, "FOLDLINE_TOKEN", "FOLDLINE_CHECKPOINT_KEY")
    print("not in the run's env:", ", ".join(n for n in kept_out if n not in plain))
    for printed in (plain, live):
        for name, value in RUNTIME.items():
            assert printed[name] == value, name
        assert _passed(printed) == expected, _passed(printed) ^ expected
        for name in (*SECRETS, "FOLDLINE_TOKEN", "FOLDLINE_CHECKPOINT_KEY", "FOLDLINE_RUN_ENV"):
            assert name not in printed, name
        assert printed["FOLDLINE_URL"] == f"http://127.0.0.1:{server.port}"
    assert live["FOLDLINE_INPUT"] == "lines" and "FOLDLINE_INPUT" not in plain


def test_runs_get_none_of_them_when_the_setting_is_unset(tmp_path: Path) -> None:
    workspace, agents = _workspace(tmp_path)
    env = {
        **RUNTIME,
        **SECRETS,
        "FOLDLINE_RUNNER": f"{shlex.quote(sys.executable)} printenv.py",
        "FOLDLINE_AGENTS_FILE": str(agents),
    }
    environ = {name: value for name, value in os.environ.items() if name != "FOLDLINE_RUN_ENV"}
    expected = {name for name in {**environ, **env} if name in ENV_ALLOWLIST}
    with serve(workspace, {**env, "FOLDLINE_RUN_ENV": ""}) as server:
        printed = _env_of_run(server, {"prompt": "plain run"})
    assert _passed(printed) == expected, _passed(printed) ^ expected
    assert not set(RUNTIME) & set(printed)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("AWS_REGION,FOLDLINE_*", "FOLDLINE_TOKEN (the operator token)"),
        ("FOLDLINE_TOK*", "FOLDLINE_TOKEN (the operator token)"),
        ("*", "'*' alone"),
        ("OTEL_* SLACK_*", "a notify channel's secrets (SLACK_*)"),
        ("HOOK_*", "HOOK_URL, which FOLDLINE_NOTIFY uses"),
        ("AWS_*_KEY", "neither a variable name nor a PREFIX_* pattern"),
    ],
)
def test_serve_refuses_a_pattern_that_could_pass_a_secret_with_one_line(
    tmp_path: Path, value: str, named: str
) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "FOLDLINE_RUN_ENV": value,
        "FOLDLINE_NOTIFY": 'curl -s "$HOOK_URL" --data-binary @-',
    }
    done = foldline("serve", "--workspace", str(tmp_path), env=env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("foldline: invalid configuration: FOLDLINE_RUN_ENV: ")
    assert named in lines[0], lines[0]
    print(f"\nFOLDLINE_RUN_ENV={value!r}: {lines[0]}")  # shown with -s
