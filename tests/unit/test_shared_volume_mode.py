"""``FOLDLINE_SHARED_VOLUME``: unset, the mount the log lies on decides; ``1`` and ``0`` force
it, ``0`` with a warning on a network mount (ADR 0042). Mount tables as the kernel writes
them (tests/unit/test_mounts.py has more)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.settings.config import ConfigError, ServerConfig, load_config
from adapters.settings.shared_volume import VolumeMode, judge_again

LOCAL = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n"
PG = "postgresql://u@127.0.0.1/db"


def nfs4(point: Path) -> str:
    """The local root with an EFS mount (efs-utils, TLS) at ``point``."""
    return LOCAL + (
        f"97 27 0:52 / {point} rw,relatime shared:51 - nfs4 127.0.0.1:/ rw,vers=4.1,"
        "rsize=1048576,wsize=1048576,hard,noresvport,proto=tcp,port=20049,addr=127.0.0.1\n"
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def unreadable() -> str:
    raise FileNotFoundError(2, "No such file or directory")


def config(workspace: Path, table: str, **env: str) -> ServerConfig:
    return load_config(env, workspace=str(workspace), mount_table=lambda: table)


def volume(config: ServerConfig) -> VolumeMode:
    assert config.volume is not None
    return config.volume


def test_shared_volume_mode_unset_is_on_where_the_log_lies_on_nfs4(workspace: Path) -> None:
    on = config(workspace, nfs4(workspace.parent))
    db = workspace / ".foldline" / "foldline.db"
    assert on.shared_volume and not volume(on).is_pending and not volume(on).is_warning
    assert volume(on).shown() == (
        f"foldline: shared-volume mode on: the log {db} lies on nfs4 (127.0.0.1:/ at"
        f" {workspace.parent}), a network file system; the log opens only under the lease"
        " (FOLDLINE_SHARED_VOLUME=0 turns it off)"
    )
    assert config(workspace, nfs4(workspace), FOLDLINE_SHARED_VOLUME="").shared_volume


def test_shared_volume_mode_unset_is_off_and_pending_on_a_local_disk(workspace: Path) -> None:
    off = config(workspace, LOCAL)
    db = workspace / ".foldline" / "foldline.db"
    assert not off.shared_volume and volume(off).is_pending and not volume(off).is_warning
    assert volume(off).line == (
        f"shared-volume mode off: the log {db} lies on ext4 (/dev/vda at /), a local file"
        " system; judged again before the log first opens (FOLDLINE_SHARED_VOLUME=1 turns it on)"
    )
    # a mount elsewhere changes nothing; one under the log, mounted since, turns it on
    assert judge_again(db, lambda: nfs4(workspace.parent / "elsewhere")) is None
    now = judge_again(db, lambda: nfs4(workspace))
    assert (
        now is not None and now.on and f"now lies on nfs4 (127.0.0.1:/ at {workspace})" in now.line
    )


def test_shared_volume_mode_follows_the_log_given_by_db(workspace: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    elsewhere = load_config(
        {}, workspace=str(workspace), db=str(shared / "log.db"), mount_table=lambda: nfs4(shared)
    )
    assert elsewhere.shared_volume and str(shared / "log.db") in volume(elsewhere).line


@pytest.mark.parametrize("text", ["1", "true", "yes", "on"])
def test_shared_volume_mode_one_forces_it_on(workspace: Path, text: str) -> None:
    on = config(workspace, LOCAL, FOLDLINE_SHARED_VOLUME=text)
    assert on.shared_volume and not volume(on).is_pending
    assert volume(on).line.startswith("shared-volume mode on: FOLDLINE_SHARED_VOLUME=1 (the log")


@pytest.mark.parametrize("text", ["0", "false", "no", "off"])
def test_shared_volume_mode_zero_forces_it_off_with_a_warning_on_a_network_mount(
    workspace: Path, text: str
) -> None:
    local = config(workspace, LOCAL, FOLDLINE_SHARED_VOLUME=text)
    assert not local.shared_volume and not volume(local).is_warning
    assert not volume(local).is_pending
    forced = config(workspace, nfs4(workspace.parent), FOLDLINE_SHARED_VOLUME=text)
    assert not forced.shared_volume and volume(forced).is_warning
    assert not volume(forced).is_pending
    assert (
        volume(forced)
        .shown()
        .startswith(
            "foldline: warning: shared-volume mode off by FOLDLINE_SHARED_VOLUME=0, but the log"
        )
    )
    assert f"nfs4 (127.0.0.1:/ at {workspace.parent}), a network file system" in volume(forced).line


def test_shared_volume_mode_refuses_other_values(workspace: Path) -> None:
    with pytest.raises(ConfigError, match="FOLDLINE_SHARED_VOLUME='maybe'"):
        config(workspace, LOCAL, FOLDLINE_SHARED_VOLUME="maybe")


def test_shared_volume_mode_is_never_on_for_a_postgresql_log(workspace: Path) -> None:
    auto = load_config({"FOLDLINE_DB": PG}, workspace=str(workspace), mount_table=unreadable)
    assert not auto.shared_volume and not volume(auto).is_pending  # no table read at all
    assert "the log is on PostgreSQL" in volume(auto).line
    with pytest.raises(ConfigError, match="PostgreSQL"):
        load_config(
            {"FOLDLINE_DB": PG, "FOLDLINE_SHARED_VOLUME": "1"},
            workspace=str(workspace),
            mount_table=unreadable,
        )


def test_shared_volume_mode_unset_with_no_table_is_off_with_a_warning(workspace: Path) -> None:
    blind = load_config({}, workspace=str(workspace), mount_table=unreadable)
    assert not blind.shared_volume and volume(blind).is_warning and volume(blind).is_pending
    assert "cannot tell where the log" in volume(blind).line
    assert "No such file or directory" in volume(blind).line
    garbled = config(workspace, "not a mountinfo line\n")
    assert not garbled.shared_volume and "is not a mountinfo line" in volume(garbled).line
