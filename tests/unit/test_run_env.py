"""``FOLDLINE_RUN_ENV`` (issue 40): what a run gets of the server's environment beyond the
allowlist, and the entries refused at boot because they could pass a secret."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from adapters.settings.config import ConfigError, load_config
from adapters.settings.run_env import SOURCE_LIST, RunEnv, parse_run_env
from adapters.system.processes import ENV_ALLOWLIST

ROOT = Path(__file__).resolve().parents[2]


def test_run_env_takes_names_and_prefix_patterns_split_by_commas_and_whitespace() -> None:
    parsed = parse_run_env(" AWS_REGION,\tOTEL_*  ,, MY_AGENT_MODEL\nAGENT_OBSERVABILITY_*,OTEL_* ")
    assert parsed.names == {"AWS_REGION", "MY_AGENT_MODEL"}
    assert parsed.prefixes == ("OTEL_", "AGENT_OBSERVABILITY_")
    assert parsed.entries == ["AWS_REGION", "MY_AGENT_MODEL", "OTEL_*", "AGENT_OBSERVABILITY_*"]
    assert parsed.passes("OTEL_SERVICE_NAME") and parsed.passes("AWS_REGION")
    assert not parsed.passes("AWS_REGIONS") and not parsed.passes("OTEL") and not parsed.passes("")
    for empty in ("", "  ", ",", " , \n"):
        assert parse_run_env(empty) == RunEnv()


def test_run_env_base_is_the_allowlist_plus_the_named_under_nothing_else() -> None:
    environ = {
        "PATH": "/bin",
        "HOME": "/root",
        "AWS_REGION": "eu-west-1",
        "AWS_PROFILE": "admin",
        "OTEL_SERVICE_NAME": "agent",
        "FOLDLINE_TOKEN": "operator",
        "UNRELATED": "x",
    }
    assert RunEnv().base(environ) == {"PATH": "/bin", "HOME": "/root"}
    base = parse_run_env(",".join(SOURCE_LIST)).base(environ)
    assert base == {
        "PATH": "/bin",
        "HOME": "/root",
        "AWS_REGION": "eu-west-1",
        "OTEL_SERVICE_NAME": "agent",
    }
    assert set(RunEnv().base(environ)) <= set(ENV_ALLOWLIST)


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("FOLDLINE_*", "FOLDLINE_TOKEN (the operator token), FOLDLINE_NOTIFY (the notify hook)"),
        ("FOLDLINE_TOK*", "would pass FOLDLINE_TOKEN (the operator token);"),
        ("FOLDLINE_TOKEN", "would pass FOLDLINE_TOKEN (the operator token);"),
        ("FOLDLINE_NOTIFY", "FOLDLINE_NOTIFY (the notify hook)"),
        ("FOLDLINE_FRONT_*", "FOLDLINE_FRONT_TOKEN (the front's token)"),
        ("FOLDLINE_CHECKPOINT_KEY", "FOLDLINE_CHECKPOINT_KEY (the checkpoint key)"),
        ("FOLDLINE*", "FOLDLINE_TOKEN (the operator token)"),
        ("FOLD*", "FOLDLINE_TOKEN (the operator token)"),
        ("F*", "FOLDLINE_TOKEN (the operator token)"),
        ("FOLDLINE_URL", "foldline's own variables (FOLDLINE_*)"),
        ("FOLDLINE_RUN*", "foldline's own variables (FOLDLINE_*)"),
        ("FOLDLINE_DEMO_DELAY_S", "foldline's own variables (FOLDLINE_*)"),
    ],
)
def test_run_env_refuses_what_could_reach_foldlines_own_variables(entry: str, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_run_env(f"AWS_REGION, {entry}")
    message = str(refused.value)
    assert message.startswith(f"FOLDLINE_RUN_ENV: {entry!r} would pass ") and said in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("entry", "family"),
    [
        ("SLACK_*", "SLACK_*"),
        ("SLACK_BOT_TOKEN", "SLACK_*"),
        ("S*", "SLACK_*"),
        ("TELEGRAM_BOT_TOKEN", "TELEGRAM_*"),
        ("FEISHU_APP_*", "FEISHU_*"),
        ("LARK*", "LARK_*"),
        ("WECOM_*", "WECOM_*"),
    ],
)
def test_run_env_refuses_the_notify_channels_secrets(entry: str, family: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{entry!r} would pass a notify channel's")):
        parse_run_env(entry)
    with pytest.raises(ConfigError, match=re.escape(family)):
        parse_run_env(entry)


def test_run_env_refuses_what_the_notify_hook_names() -> None:
    hook = 'curl -s -H "Authorization: Bearer ${HOOK_TOKEN}" "$HOOK_URL" --data-binary @-'
    for entry, named in (("HOOK_*", "HOOK_TOKEN, HOOK_URL"), ("HOOK_URL", "HOOK_URL"), ("H*", "")):
        with pytest.raises(ConfigError, match=re.escape(f"{named}, which FOLDLINE_NOTIFY uses")):
            parse_run_env(f"OTEL_* {entry}", notify=hook)
    assert parse_run_env("HOOK_*").prefixes == ("HOOK_",)  # no hook, nothing it names
    assert parse_run_env("HOOKS_*", notify=hook).prefixes == ("HOOKS_",)


@pytest.mark.parametrize("entry", ["*", "**", "*_KEY", "AWS_*_KEY", "AWS**", "1AWS", "AWS-REGION"])
def test_run_env_refuses_malformed_entries(entry: str) -> None:
    with pytest.raises(ConfigError, match=r"^FOLDLINE_RUN_ENV: ") as refused:
        parse_run_env(f"OTEL_* {entry}")
    if entry == "*":
        assert "alone would pass the server's whole environment" in str(refused.value)
    else:
        assert "neither a variable name nor a PREFIX_* pattern" in str(refused.value)


def test_load_config_reads_run_env_and_checks_it_against_its_notify_hook(tmp_path: Path) -> None:
    config = load_config({"FOLDLINE_RUN_ENV": "AWS_REGION OTEL_*"}, workspace=str(tmp_path))
    assert config.run_env.entries == ["AWS_REGION", "OTEL_*"]
    assert load_config({}, workspace=str(tmp_path)).run_env == RunEnv()  # unset: nothing more
    env = {"FOLDLINE_RUN_ENV": "WEBHOOK_*", "FOLDLINE_NOTIFY": "post $WEBHOOK_SECRET"}
    with pytest.raises(ConfigError, match="WEBHOOK_SECRET, which FOLDLINE_NOTIFY uses"):
        load_config(env, workspace=str(tmp_path))


def test_the_images_run_env_is_the_source_systems_list() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    found = re.findall(r'^ENV FOLDLINE_RUN_ENV="([^"]*)"$', dockerfile, re.MULTILINE)
    assert len(found) == 1, found
    assert parse_run_env(found[0]) == parse_run_env(" ".join(SOURCE_LIST))
    assert set(SOURCE_LIST) == {
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_CONTAINER_*",
        "OTEL_*",
        "AGENT_OBSERVABILITY_*",
    }
