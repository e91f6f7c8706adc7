"""Where a path lies, from mountinfo lines as the kernel writes them (ADR 0042)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.system import mounts

# Lines as /proc/self/mountinfo shows them: this machine's root and /dev/shm, an EC2 host's
# EFS mounted over NFS 4.1 without and with efs-utils' TLS tunnel (its stunnel on 127.0.0.1
# port 20049), an SMB share, a Docker container's overlay root and a volume bound into it, a
# FUSE sshfs mount, a WSL 9p drive (a backslash in the source), a mount point with a space.
ROOT = (
    "27 1 254:0 / / rw,relatime - ext4 /dev/vda"
    " rw,discard,no_prefetch_block_bitmaps,resv_strict,resuid=65534,resgid=65534"
)
SHM = "25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24731408k"
EFS = (
    "84 27 0:51 / /mnt/efs rw,relatime shared:44 - nfs4"
    " fs-0123456789abcdef0.efs.us-east-1.amazonaws.com:/ rw,vers=4.1,rsize=1048576,"
    "wsize=1048576,namlen=255,hard,noresvport,proto=tcp,timeo=600,retrans=2,sec=sys,"
    "clientaddr=172.31.20.5,local_lock=none,addr=172.31.22.10"
)
EFS_TLS = (
    "97 27 0:52 / /mnt/efs-tls rw,relatime shared:51 - nfs4 127.0.0.1:/ rw,vers=4.1,"
    "rsize=1048576,wsize=1048576,namlen=255,hard,noresvport,proto=tcp,port=20049,timeo=600,"
    "retrans=2,sec=sys,clientaddr=127.0.0.1,local_lock=none,addr=127.0.0.1"
)
CIFS = (
    "101 27 0:60 / /mnt/share rw,relatime shared:55 - cifs //fileserver/share rw,vers=3.1.1,"
    "cache=strict,username=alice,uid=0,noforceuid,gid=0,noforcegid,addr=10.0.0.5,"
    "file_mode=0755,dir_mode=0755,soft,nounix,serverino,mapposix,rsize=4194304,wsize=4194304"
)
OVERLAY = (
    "612 540 0:57 / / rw,relatime master:1 - overlay overlay rw,"
    "lowerdir=/var/lib/docker/overlay2/l/ABC:/var/lib/docker/overlay2/l/DEF,"
    "upperdir=/var/lib/docker/overlay2/0a1b/diff,workdir=/var/lib/docker/overlay2/0a1b/work"
)
VOLUME = (
    "630 612 254:1 /var/lib/docker/volumes/foldline-ws/_data /workspace rw,relatime master:1"
    " - ext4 /dev/vda1 rw,discard"
)
SSHFS = (
    "90 27 0:55 / /mnt/remote rw,nosuid,nodev,relatime shared:48 - fuse.sshfs"
    " alice@build:/srv rw,user_id=0,group_id=0"
)
WSL = "71 27 0:41 / /mnt/c rw,noatime - 9p C:\\134 rw,dirsync,aname=drvfs;path=C:\\134;uid=1000"
SPACED = "85 27 0:53 / /mnt/my\\040efs rw,relatime shared:45 - nfs4 127.0.0.1:/ rw,vers=4.1"


def table(*lines: str) -> list[mounts.Mount]:
    return mounts.parse("\n".join(lines) + "\n")


def on(path: str, mounted: list[mounts.Mount]) -> mounts.Mount:
    found = mounts.mount_of(path, mounted)
    assert found is not None, path
    return found


def test_mounts_parse_reads_the_fields_of_a_real_line() -> None:
    (efs,) = table(EFS_TLS)
    assert efs == mounts.Mount(97, 27, "/", "/mnt/efs-tls", "nfs4", "127.0.0.1:/")
    assert efs.describe() == "nfs4 (127.0.0.1:/ at /mnt/efs-tls)"
    (volume,) = table(VOLUME)  # an optional field (master:1) before the separator
    assert (volume.root, volume.point, volume.fstype) == (
        "/var/lib/docker/volumes/foldline-ws/_data",
        "/workspace",
        "ext4",
    )


def test_mounts_parse_undoes_octal_escapes() -> None:
    spaced, wsl = table(SPACED, WSL)
    assert spaced.point == "/mnt/my efs"
    assert wsl.source == "C:\\"
    assert mounts.unescape("a\\011b\\012c\\134d") == "a\tb\nc\\d"


def test_mounts_parse_refuses_a_line_that_is_no_mountinfo_line() -> None:
    with pytest.raises(ValueError, match="line 2 is not a mountinfo line"):
        mounts.parse(ROOT + "\n/dev/vda / ext4 rw 0 0\n")  # a /proc/mounts line


@pytest.mark.parametrize(
    ("line", "network"),
    [
        (EFS, True),
        (EFS_TLS, True),
        (CIFS, True),
        (SSHFS, True),
        (WSL, True),
        (ROOT, False),
        (SHM, False),
        (OVERLAY, False),
        (VOLUME, False),
        ("40 27 0:60 / /mnt/x rw - fuse.lxcfs lxcfs rw", False),  # FUSE, but local
        ("41 27 0:61 / /mnt/y rw - fuse /dev/fuse rw", False),  # no subtype: nothing known
        ("42 27 0:62 / /mnt/z rw - virtiofs myfs rw", False),
        ("43 27 7:0 / /mnt/cd ro - efs /dev/loop0 ro", False),  # SGI's EFS, not AWS's
        ("44 27 0:63 / /mnt/s3 rw - fuse.s3fs s3fs rw", True),
        ("45 27 0:64 / /mnt/cephfs rw - ceph 10.0.0.1:6789:/ rw", True),
    ],
)
def test_mounts_network_file_systems_are_the_listed_types(line: str, network: bool) -> None:
    (mount,) = table(line)
    assert mount.is_network is network


def test_mounts_mount_of_is_the_longest_mount_point_prefix() -> None:
    mounted = table(ROOT, SHM, EFS, EFS_TLS, SPACED)
    assert on("/mnt/efs/.foldline/foldline.db", mounted).mount_id == 84
    assert on("/mnt/efs", mounted).mount_id == 84
    # /mnt/efs is no prefix of /mnt/efs-tls's paths, nor of /mnt/efsx
    assert on("/mnt/efs-tls/ws", mounted).mount_id == 97
    assert on("/mnt/efsx/ws", mounted).point == "/"
    assert on("/mnt/my efs/ws", mounted).mount_id == 85
    assert on("/dev/shm/x", mounted).fstype == "tmpfs"
    assert mounts.mount_of("/srv", table(SHM)) is None


def test_mounts_mount_of_takes_the_top_of_a_stack() -> None:
    under = "30 27 0:40 / /mnt/base rw - tmpfs tmpfs rw"
    over = "31 30 0:41 /sess /mnt/base rw - nfs4 127.0.0.1:/ rw"
    assert on("/mnt/base/x", table(ROOT, over, under)).mount_id == 31


def test_mounts_existing_place_is_the_nearest_ancestor_with_links_resolved(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert mounts.existing_place(tmp_path / "link" / ".foldline" / "foldline.db") == str(real)
    assert mounts.existing_place(real) == str(real)
    table_text = f"{ROOT}\n99 27 0:70 / {real} rw - nfs4 127.0.0.1:/ rw\n"
    lies = mounts.lies_on(tmp_path / "link" / ".foldline" / "foldline.db", table_text)
    assert lies is not None and lies.is_network and lies.point == str(real)


def test_mounts_this_machines_table_parses_and_its_temporary_dir_is_local(
    tmp_path: Path,
) -> None:
    lies = mounts.lies_on(tmp_path / "foldline.db", mounts.read_table())
    assert lies is not None and not lies.is_network, lies
