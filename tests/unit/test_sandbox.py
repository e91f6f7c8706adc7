"""Who a run executes as, and what a root server does to hand it the workspace (ADR 0029)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adapters.services import sandbox
from adapters.settings.config import ConfigError, RunUser, load_config
from engine.errors import LogMissing

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="switches users only as root")


def test_the_run_user_defaults_to_1000_as_root_and_to_nobody_else_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert load_config({}, workspace=str(tmp_path)).run_user == RunUser(1000, 1000, "1000:1000")
    as_root = load_config({"FOLDLINE_RUN_USER": "root"}, workspace=str(tmp_path))
    assert as_root.run_user is not None and as_root.run_user.is_root
    assert sandbox.for_server(as_root) is None  # root, as asked: no switch
    for bad in ("1000", "a:b", "no-such-user-here"):
        with pytest.raises(ConfigError, match="FOLDLINE_RUN_USER"):
            load_config({"FOLDLINE_RUN_USER": bad}, workspace=str(tmp_path))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert load_config({}, workspace=str(tmp_path)).run_user is None
    with pytest.raises(ConfigError, match="only a server running as root"):
        load_config({"FOLDLINE_RUN_USER": "1000:1000"}, workspace=str(tmp_path))


def test_a_run_starts_in_a_namespace_that_hides_the_log_then_drops_every_privilege(
    tmp_path: Path,
) -> None:
    jail = sandbox.Sandbox(RunUser(1000, 1001, "1000:1001"), tmp_path / ".foldline", tmp_path)
    argv = jail.wrap(["sh", "-c", "gate", "command"])
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    assert str(tmp_path / ".foldline") in argv
    dropped = argv[argv.index("--reuid=1000") :]
    assert dropped[:6] == [
        "--reuid=1000",
        "--regid=1001",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]
    assert dropped[-5:] == ["--", "sh", "-c", "gate", "command"]
    assert jail.env() == {"HOME": str(tmp_path), "USER": "1000:1001", "LOGNAME": "1000:1001"}
    # A PostgreSQL log has no directory to hide: setpriv alone.
    plain = sandbox.Sandbox(jail.user, None, tmp_path).wrap(["true"])
    assert plain[0] == "setpriv" and "unshare" not in plain


def test_a_server_that_cannot_isolate_runs_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no util-linux on it
    jail = sandbox.Sandbox(RunUser(1000, 1000, "1000:1000"), tmp_path, tmp_path)
    with pytest.raises(ConfigError, match="needs unshare, mount, setpriv"):
        sandbox.check(jail, "auto")


@root_only
def test_the_isolation_check_finds_what_works_here_as_root(tmp_path: Path) -> None:
    jail = sandbox.Sandbox(RunUser(1000, 1000, "1000:1000"), tmp_path, tmp_path / "h")
    assert sandbox.check(jail, "auto") == "namespace"  # root on this machine may make one
    assert sandbox.check(jail, "namespace") == "namespace"
    with pytest.raises(ConfigError, match="modes: without a mount and pid namespace per run"):
        sandbox.check(jail, "modes")  # ADR 0064: runs are never kept together silently


def test_the_access_level_of_a_run_follows_its_agent_and_foldline_access(
    tmp_path: Path,
) -> None:
    for access in ("workspace", "readonly", "full"):
        assert load_config({"FOLDLINE_ACCESS": access}, workspace=str(tmp_path)).access == access
    assert load_config({}, workspace=str(tmp_path)).access == "workspace"
    with pytest.raises(ConfigError, match="FOLDLINE_ACCESS='write': expected workspace"):
        load_config({"FOLDLINE_ACCESS": "write"}, workspace=str(tmp_path))
    level = sandbox.level_of
    assert [level("", False, a, False) for a in ("workspace", "readonly", "full")] == [
        "workspace",
        "readonly",
        "full",
    ]
    assert level("reviewer", True, "full", False) == "readonly"  # the agent's mode wins
    assert level("", False, "workspace", True) == level("coder", False, "full", True) == "writer"
    assert level("", False, "readonly", True) == "readonly"  # readonly wins over a scope
    assert level("coder", False, "full", False) == "workspace"  # full is the default agent's


@root_only
def test_the_workspace_is_handed_over_but_the_log_directory_and_links_out_are_not(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "src" / "deep").mkdir(parents=True)
    (workspace / "src" / "deep" / "file.txt").write_text("x")
    (workspace / ".foldline").mkdir(mode=0o755)
    (workspace / ".foldline" / "foldline.db").write_text("log")
    outside = tmp_path / "outside.txt"
    outside.write_text("not the workspace's")
    (workspace / "link-out").symlink_to(outside)
    user = RunUser(1000, 1000, "1000:1000")
    jail = sandbox.Sandbox(user, workspace / ".foldline", tmp_path / "state" / "home" / "1000")
    sandbox.prepare(jail, workspace)
    for path in (workspace, workspace / "src" / "deep" / "file.txt"):
        assert (path.stat().st_uid, path.stat().st_gid) == (1000, 1000)
    assert os.lstat(workspace / "link-out").st_uid == 1000  # the link itself
    assert outside.stat().st_uid == 0  # never followed
    log_dir = (workspace / ".foldline").stat()
    assert (log_dir.st_uid, log_dir.st_mode & 0o777) == (0, 0o700)
    assert (workspace / ".foldline" / "foldline.db").stat().st_uid == 0
    home = jail.home.stat()
    assert (home.st_uid, home.st_mode & 0o777) == (1000, 0o700)


@root_only
def test_a_log_directory_a_run_made_is_never_trusted(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".foldline").mkdir(parents=True)
    os.chown(workspace / ".foldline", 1000, 1000)
    jail = sandbox.Sandbox(RunUser(1000, 1000, "1000:1000"), workspace / ".foldline", tmp_path)
    with pytest.raises(LogMissing, match="not a directory of the server's own"):
        sandbox.prepare(jail, workspace)


def test_the_log_and_the_state_directory_must_be_out_of_the_workspace(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="a directory of its own"):
        load_config({"FOLDLINE_DB": str(tmp_path / "foldline.db")}, workspace=str(tmp_path))
    with pytest.raises(ConfigError, match="lies in the workspace"):
        load_config({"FOLDLINE_STATE_DIR": str(tmp_path / "state")}, workspace=str(tmp_path))
