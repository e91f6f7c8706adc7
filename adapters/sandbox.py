"""Runs out of the log's reach (ADR 0029): another user, no privileges, the log's directory hidden.

A server running as root (a container, CI) starts every run as ``FOLDLINE_RUN_USER``
(``1000:1000`` unless set; ``root`` only when named). The run gets the workspace to do anything
in, and nothing else of the server's:

- **Another user, no privileges.** ``setpriv`` sets the run user's uid and gid, clears the
  supplementary groups and every capability set, and sets ``no_new_privs``, so neither a
  setuid binary nor a file capability gives anything back. A process of another uid cannot
  signal or trace the server's processes (the kernel's own rule).
- **The log's directory hidden.** The run starts in a mount namespace of its own (``unshare``)
  where an empty, read-only tmpfs is mounted over the directory holding the log, its WAL, the
  lease file and the operator token (``.foldline/``). There the directory is empty and is a
  mount point: ``rm -rf``, ``git clean -xfd``, ``mv`` and ``rename`` of it fail (EBUSY,
  EROFS), and nothing in it can be read or opened. Mounts handed into a namespace from a more
  privileged one are locked, so even a user namespace the run makes cannot unmount it. The
  directory itself is root's, 0700, as a second wall.
- **The workspace is the run user's.** At activation the workspace tree (but not the log's
  directory) is handed to the run user if its root is not theirs yet, so runs can create,
  edit and delete files and use ``git`` as they could before.
- **A home of its own**: ``<state dir>/home/<uid>``, 0700.

The three tools (``unshare``, ``mount``, ``setpriv``) are util-linux's, in every Debian image;
``check`` runs the whole chain once at boot, so a server that cannot isolate its runs refuses
to start instead of running them unisolated. A server that is not root runs its runs as
itself: it has nothing to switch to (README "Security model").
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from adapters.config import RunUser
from adapters.config_error import ConfigError
from engine.errors import LogMissing

log = logging.getLogger("foldline.sandbox")

# Runs in the run's new mount namespace, still root: hide the directory, then drop to the run
# user and exec the command. ``$1`` is the directory, the rest is setpriv's argv.
_HIDE_THEN_DROP = (
    'hidden=$1; shift; mount -t tmpfs -o ro,nosuid,nodev,noexec,mode=0,size=4k foldline "$hidden"'
    ' || exit 126; exec setpriv "$@"'
)
TOOLS = ("unshare", "mount", "setpriv")


@dataclass(frozen=True)
class Sandbox:
    """How runs are started: as ``user``, with ``hidden`` out of their view."""

    user: RunUser
    hidden: Path | None  # the log's directory (None: a PostgreSQL log, no file to hide)
    home: Path

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as the run user, in a mount namespace that hides the log's directory."""
        drop = [
            "setpriv",
            f"--reuid={self.user.uid}",
            f"--regid={self.user.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
            *argv,
        ]
        if self.hidden is None:
            return drop
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            _HIDE_THEN_DROP,
            "foldline-run",
            str(self.hidden),
            *drop[1:],
        ]

    def env(self) -> dict[str, str]:
        """What the run's environment says about who it is."""
        return {"HOME": str(self.home), "USER": self.user.name, "LOGNAME": self.user.name}


def for_server(user: RunUser | None, log_dir: Path | None, state_dir: Path) -> Sandbox | None:
    """The sandbox runs get, or None when they run as the server's own user (a non-root
    server, or ``FOLDLINE_RUN_USER=root``)."""
    if user is None or user.is_root:
        return None
    return Sandbox(user, log_dir, state_dir / "home" / str(user.uid))


def check(sandbox: Sandbox) -> None:
    """Run the whole chain once (``id -u`` as the run user, the hidden directory a tmpfs),
    at boot, before anything is served.

    Raises:
        ConfigError: a tool is missing or the chain fails: runs could not be isolated.
    """
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise ConfigError(
            f"running jobs as {sandbox.user.name} needs {', '.join(missing)} (util-linux);"
            " install it, or set FOLDLINE_RUN_USER=root to run jobs as root"
        )
    probe = Path(tempfile.mkdtemp(prefix="foldline-sandbox-check-"))
    try:
        os.chmod(probe, 0o755)  # visible to the run user but for the mount
        (probe / "log").write_bytes(b"")
        script = f'[ "$(id -u)" = {sandbox.user.uid} ] && [ ! -e "$0/log" ]'
        answer = subprocess.run(
            Sandbox(sandbox.user, probe, sandbox.home).wrap(["sh", "-c", script, str(probe)]),
            cwd="/",
            capture_output=True,
            timeout=30,
            check=False,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if answer.returncode != 0:
        raise ConfigError(
            f"runs cannot be isolated as {sandbox.user.name} (exit {answer.returncode}:"
            f" {answer.stderr.decode(errors='replace').strip()[:300]}); set"
            " FOLDLINE_RUN_USER=root to run jobs as root"
        )


def prepare(sandbox: Sandbox, workspace: Path) -> None:
    """At activation, as root: the log's directory root's and 0700, the run user's home,
    and the workspace handed to the run user if its root is not theirs yet.

    Raises:
        LogMissing: the log's directory is not a real directory of the server's (a run made
            it, or a link): the log must not be trusted to it.
    """
    hidden = sandbox.hidden
    if hidden is not None:
        info = os.lstat(hidden)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise LogMissing(
                f"{hidden} is not a directory of the server's own: refusing to trust the log to it"
            )
        os.chmod(hidden, 0o700)
    sandbox.home.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    sandbox.home.mkdir(mode=0o700, exist_ok=True)
    os.chown(sandbox.home, sandbox.user.uid, sandbox.user.gid)
    if os.lstat(workspace).st_uid != sandbox.user.uid:
        hand_over(workspace, sandbox.user, skip=hidden)


def hand_over(root: Path, user: RunUser, skip: Path | None) -> None:
    """Give ``root`` and everything under it, except ``skip``, to ``user``. Links are changed
    themselves, never followed; other file systems under it are left alone."""
    device = os.lstat(root).st_dev
    os.chown(root, user.uid, user.gid, follow_symlinks=False)
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = [d for d in dirs if here / d != skip and os.lstat(here / d).st_dev == device]
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                os.chown(here / name, user.uid, user.gid, follow_symlinks=False)
    log.warning("workspace %s handed to the run user %s", root, user.name)
