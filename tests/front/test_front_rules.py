"""The front's rules without a process: session ids, served paths, settings, mountinfo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adapters.front import session_dir, worker
from adapters.front.settings import load_front_config, served, session_id_ok
from adapters.settings.config_error import ConfigError
from tests.support.front import SID_A, SID_B

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the front's settings need root")


def test_front_session_ids_are_33_to_255_safe_characters() -> None:
    assert session_id_ok("a" * 33) and session_id_ok("A1_-" + "x" * 251)
    for bad in (None, "a" * 32, "a" * 256, "." + "a" * 40, "_" + "a" * 40, "a" * 40 + "/", ""):
        assert not session_id_ok(bad), bad


def test_front_serves_the_contract_paths_only() -> None:
    for path in ("/invocations", "/", "/.well-known/agent-card.json", "/v1", "/v1/jobs"):
        assert served(path), path
    for path in ("/console/", "/console/api/overview"):
        assert served(path), path
    for path in ("/v1x", "/ready", "/notify", "/metrics", "/openapi.json", "/invocations/x"):
        assert not served(path), path


@needs_root
def test_front_settings_refuse_an_overlap_a_relative_base_and_the_workers_port() -> None:
    env = {"FOLDLINE_SESSION_BASE": "/mnt/efs"}
    assert load_front_config(env).workspace == Path("/workspace")
    for base, ws in (("/workspace", "/workspace"), ("/workspace/s", None), ("/mnt", "/mnt/w")):
        with pytest.raises(ConfigError, match="overlaps"):
            load_front_config({"FOLDLINE_SESSION_BASE": base}, workspace=ws)
    with pytest.raises(ConfigError, match="absolute"):
        load_front_config({"FOLDLINE_SESSION_BASE": "efs"})
    assert load_front_config(env).worker_port == 0  # unset: a free one, picked at boot
    with pytest.raises(ConfigError, match="the worker's"):
        load_front_config({**env, "FOLDLINE_WORKER_PORT": "9100"}, bind="0.0.0.0:9100")
    with pytest.raises(ConfigError, match="expected a port number"):
        load_front_config({**env, "FOLDLINE_WORKER_PORT": "70000"})
    with pytest.raises(ConfigError, match="other than root"):
        load_front_config({**env, "FOLDLINE_RUN_USER": "root"})


@needs_root
def test_front_worker_environment_is_a_named_allowlist() -> None:
    config = load_front_config({"FOLDLINE_SESSION_BASE": "/mnt/efs"})
    given = {
        "PATH": "/bin",
        "FOLDLINE_RUNNER": "cat",
        "FOLDLINE_NOTIFY": "post-it",
        "FOLDLINE_SESSION_BASE": "/mnt/efs",
        "FOLDLINE_DB": "/elsewhere.db",
        "FOLDLINE_RUN_USER": "1000:1000",
        "OTEL_SERVICE_NAME": "x",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://169.254.170.2/x",
        "AWS_SESSION_TOKEN": "t",
        "SLACK_TOKEN": "secret",
    }
    env = worker.worker_env(config, SID_A, "http://127.0.0.1:1", "tok", given, 7)
    for kept in ("FOLDLINE_RUNNER", "OTEL_SERVICE_NAME", "AWS_SESSION_TOKEN", "PATH"):
        assert env[kept] == given[kept]
    assert "AWS_CONTAINER_CREDENTIALS_FULL_URI" in env
    for dropped in ("FOLDLINE_NOTIFY", "FOLDLINE_SESSION_BASE", "FOLDLINE_DB", "SLACK_TOKEN"):
        assert dropped not in env
    assert "FOLDLINE_RUN_USER" not in env
    assert env["FOLDLINE_SHARED_VOLUME"] == "1" and env["FOLDLINE_WORKSPACE"] == "/workspace"
    assert env["FOLDLINE_FRONT_TOKEN"] == "tok" and env["FOLDLINE_FRONT_LISTEN_FD"] == "7"
    # The worker's state is the session directory's own, not the workspace path's.
    assert env["FOLDLINE_STATE_DIR"] == env["HOME"] == str(config.worker_state(SID_A))
    assert config.worker_state(SID_A) != config.worker_state(SID_B)


@needs_root
def test_front_forwards_run_env_and_what_it_names_to_the_worker_and_no_secret() -> None:
    hook = 'curl -s "$HOOK_URL"'
    given = {
        "PATH": "/bin",
        "FOLDLINE_RUN_ENV": "AWS_PROFILE, MY_AGENT_*, OTEL_*",
        "FOLDLINE_NOTIFY": hook,
        "AWS_PROFILE": "agent",
        "MY_AGENT_MODEL": "small",
        "OTEL_SERVICE_NAME": "agent",
        "HOOK_URL": "https://example.invalid/secret",
        "SLACK_TOKEN": "secret",
        "UNRELATED": "x",
    }
    config = load_front_config({**given, "FOLDLINE_SESSION_BASE": "/mnt/efs"})
    assert config.run_env.entries == ["AWS_PROFILE", "MY_AGENT_*", "OTEL_*"]
    env = worker.worker_env(config, SID_A, "http://127.0.0.1:1", "tok", given, 7)
    for kept in ("FOLDLINE_RUN_ENV", "AWS_PROFILE", "MY_AGENT_MODEL", "OTEL_SERVICE_NAME"):
        assert env[kept] == given[kept]
    for dropped in ("FOLDLINE_NOTIFY", "HOOK_URL", "SLACK_TOKEN", "UNRELATED"):
        assert dropped not in env
    # Unset, the worker gets the fixed set only: nothing the setting would have named.
    plain = load_front_config({"FOLDLINE_SESSION_BASE": "/mnt/efs"})
    assert "MY_AGENT_MODEL" not in worker.worker_env(
        plain, SID_A, "http://127.0.0.1:1", "tok", given, 7
    )


@needs_root
def test_front_refuses_a_run_env_that_could_pass_its_secrets() -> None:
    env = {"FOLDLINE_SESSION_BASE": "/mnt/efs", "FOLDLINE_NOTIFY": "post $HOOK_URL"}
    for value, said in (
        ("FOLDLINE_*", "FOLDLINE_NOTIFY (the notify hook)"),
        ("FOLDLINE_FRONT_TOKEN", "the front's token"),
        ("HOOK_*", "HOOK_URL, which FOLDLINE_NOTIFY uses"),
        ("SLACK_*", "a notify channel's secrets"),
        ("*", "alone"),
    ):
        with pytest.raises(ConfigError, match="FOLDLINE_RUN_ENV: ") as refused:
            load_front_config({**env, "FOLDLINE_RUN_ENV": value})
        assert said in str(refused.value), value


def test_front_mountinfo_paths_are_unescaped(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 0:21 / / rw - ext4 /dev/root rw\n"
        "30 22 0:40 / /mnt/my\\040efs rw - nfs4 x rw\n"
        "31 30 0:41 / /mnt/my\\040efs rw - nfs4 x rw\n"
    )
    assert session_dir.mount_points(str(info)).count("/mnt/my efs") == 2
    assert session_dir.is_mount_point(Path("/mnt/my efs"), str(info))
    assert not session_dir.is_mount_point(Path("/mnt"), str(info))
