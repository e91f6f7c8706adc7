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
- **A home of its own**: ``<state dir>/home/<uid>``, 0700, where the server's git keeps the
  writers' worktrees.
- **Runs apart, and what each may write** (ADR 0064, ``wrap_run``): every run gets a pid
  namespace of its own, a fresh home and ``TMPDIR`` over the covered homes, and the workspace
  read-only or writable as its access level says.

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
from dataclasses import dataclass, replace
from pathlib import Path

from adapters.settings.config import RunUser, ServerConfig
from adapters.settings.config_error import ConfigError
from engine.domain.agents import Mode
from engine.errors import LogMissing

log = logging.getLogger("foldline.sandbox")

# Runs in the run's new mount namespace, still root: hide the directory, then drop to the run
# user and exec the command. ``$1`` is the directory, the rest is setpriv's argv.
_HIDE_THEN_DROP = (
    'hidden=$1; shift; mount -t tmpfs -o ro,nosuid,nodev,noexec,mode=0,size=4k foldline "$hidden"'
    ' || exit 126; exec setpriv "$@"'
)
TOOLS = ("unshare", "mount", "setpriv")


# A server that is not root (the front's worker) has no other user to switch to. With USERNS
# its runs keep its uid but start in a user namespace of their own (no privilege needed) with
# their own pid namespace and /proc (the server's processes, hence their /proc/<pid>/root and
# fds, are out of sight) and a mount namespace where the log's directory is covered as above;
# a second user namespace, where the run is the server's uid again and has no capability,
# locks that cover (mounts handed to a less privileged namespace cannot be unmounted). The
# shell stays as the namespace's PID 1 and the run is its child: a PID 1 ignores a SIGTERM it
# has no handler for, and a run's graceful stop is a SIGTERM to its group. A run's end by a
# signal then reads as the shell's exit code 128 + N.
#
# The server's state directory (the log's anchor, and under the front the worker's home) is
# its uid's too, so it is covered the same way, but for the run's own home in it: the home is
# held open, the state directory covered by an empty tmpfs, the home's path made in it and the
# held home bound there (by its fd: ``--no-canonicalize``, or mount would resolve the path to
# the covered one), then the tmpfs made read-only. The run sees the state directory with
# nothing in it but its home's path, cannot write in it, and cannot unmount it (locked).
_HIDE_THEN_NEST = (
    "hidden=$1 state=$2 home=$3 uid=$4 gid=$5; shift 5; mount -t tmpfs -o"
    ' ro,nosuid,nodev,noexec,mode=0,size=4k foldline "$hidden" || exit 126;'
    ' if [ -n "$state" ]; then case $home in "$state"/*) ;; *) exit 126;; esac;'
    ' { exec 3<"$home" && mount -t tmpfs -o nosuid,nodev,noexec,mode=0711,size=4k'
    ' foldline-state "$state" && mkdir -p "$home"'
    ' && mount --no-canonicalize --bind /proc/self/fd/3 "$home"'
    ' && mount -o remount,bind,ro "$state" && exec 3<&-; } || exit 126; fi;'
    ' unshare --user --map-user="$uid" --map-group="$gid" --mount -- "$@"'
)
NAMESPACE, MODES, USERNS = "namespace", "modes", "userns"

# What a run is allowed to write (ADR 0064), set by its agent's mode, ``FOLDLINE_ACCESS`` for
# the default agent, and a write_scope (a writer in its worktree).
FULL, WORKSPACE, READONLY, WRITER = "full", "workspace", "readonly", "writer"
ACCESS_LEVELS = (WORKSPACE, READONLY, FULL)  # FOLDLINE_ACCESS's values, the default first

# A run's own view, made as (namespace) root in the run's new mount and pid namespaces before
# it drops to the run user (ADR 0064). The kept paths (a writer's worktree, the run's given
# files) are held open first, as they lie under the homes the run's view covers. Binds are
# made before anything is remounted read-only: a bind copies the flags of the mount it is
# taken from. ``cd "$PWD"`` at the end moves the shell off the directory it inherited, which
# is on the writable mount it started from, onto the view's own.
_RUN_VIEW = (
    "ws=$1 level=$2 hidden=$3 homes=$4 home=$5 uid=$6 gid=$7 wt=$8 given=$9; shift 9;"
    ' { [ -z "$wt" ] || exec 3<"$wt"; } && { [ -z "$given" ] || exec 4<"$given"; }'
    ' && mount --bind "$ws" "$ws" || exit 126;'
    ' while [ "$1" != -- ]; do if [ -e "$1" ]; then mount --bind "$1" "$1" || exit 126; fi;'
    " shift; done; shift;"
    ' if [ -n "$hidden" ]; then mount -t tmpfs -o ro,nosuid,nodev,noexec,mode=0,size=4k foldline'
    ' "$hidden" || exit 126; fi;'
    ' case $level in readonly|writer) mount -o remount,bind,ro "$ws" || exit 126;; esac;'
    ' case $home in "$homes"/*) ;; *) exit 126;; esac;'
    ' mount -t tmpfs -o nosuid,nodev,mode=0711,size=64k foldline-homes "$homes"'
    ' && mkdir -p "$home" && mount -t tmpfs -o nosuid,nodev,mode=0700,uid="$uid",gid="$gid"'
    ' foldline-home "$home" && mkdir -m 0700 "$home/tmp" && chown "$uid:$gid" "$home/tmp"'
    " || exit 126;"
    ' if [ -n "$wt" ]; then mkdir -p "$wt" && mount --no-canonicalize --bind /proc/self/fd/3'
    ' "$wt" || exit 126; fi;'
    ' if [ -n "$given" ]; then mkdir -p "$given" && mount --no-canonicalize --bind'
    ' /proc/self/fd/4 "$given" || exit 126; fi;'
    ' exec 3<&- 4<&-; mount -o remount,bind,ro "$homes" || exit 126;'
    ' if [ "$level" != full ]; then mount -o remount,bind,ro / || exit 126; fi;'
    ' cd "$PWD" || exit 126; "$@"'
)


@dataclass(frozen=True)
class RunView:
    """What one run sees besides the log's directory (hidden from every run): the workspace
    writable or not (``level``), a writer's worktree and the files it is given, both bound into
    its otherwise fresh home."""

    level: str = WORKSPACE
    worktree: Path | None = None
    given: Path | None = None


def level_of(agent: str, read_only: bool, access: str, writer: bool) -> str:
    """The access level of a run of ``agent``: the default agent's is ``access``
    (``FOLDLINE_ACCESS``), a read-only agent's ``readonly``, a writer's ``writer`` (its
    worktree only), any other agent's ``workspace``. ``readonly`` wins over a write_scope."""
    if read_only or (agent == "" and access == READONLY):
        return READONLY
    if writer:
        return WRITER
    return access if agent == "" else WORKSPACE


def run_view(
    config: ServerConfig, agent: str, worktree: Path | None, given: Path | None
) -> RunView:
    """What a run of ``agent`` may see and write: its access level (``level_of``), a writer's
    worktree and its given files (ADR 0064)."""
    policy = config.agents.policies.get(agent)
    read_only = policy is not None and agent != "" and policy.mode == Mode.READ_ONLY
    return RunView(level_of(agent, read_only, config.access, worktree is not None), worktree, given)


def as_user(user: RunUser, argv: Sequence[str]) -> list[str]:
    """``argv`` run by ``setpriv`` as ``user``: its uid and gid, no supplementary groups, no
    capability in any set, ``no_new_privs`` (a setuid binary or file capability gives nothing
    back)."""
    return [
        "setpriv",
        f"--reuid={user.uid}",
        f"--regid={user.gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
        *argv,
    ]


@dataclass(frozen=True)
class Sandbox:
    """How runs are started: as ``user``, with ``hidden`` out of their view."""

    user: RunUser
    hidden: Path | None  # the log's directory (None: a PostgreSQL log, no file to hide)
    home: Path
    isolation: str = NAMESPACE  # or USERNS: a server that is not root
    workspace: Path | None = None
    state: Path | None = None  # USERNS: the server's state directory, covered but for ``home``

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as the run user, in a mount namespace that hides the log's directory: the
        server's own tools (git on the writers' worktrees) as the run user. A run's own chain
        is ``wrap_run``'s."""
        drop = as_user(self.user, argv)
        if self.isolation == USERNS:
            return [
                "unshare",
                "--user",
                "--map-root-user",
                "--mount",
                "--propagation",
                "private",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "--",
                "sh",
                "-c",
                _HIDE_THEN_NEST,
                "foldline-run",
                str(self.hidden or "/nonexistent"),
                str(self.state or ""),
                str(self.home),
                str(self.user.uid),
                str(self.user.gid),
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

    def wrap_run(self, argv: Sequence[str], view: RunView) -> list[str]:
        """``argv`` as a run (ADR 0064): in a pid namespace of its own (no other process to
        see, signal or trace), a mount namespace where the log's directory is hidden, the
        homes covered by a fresh home of its own (and the worktree and given files ``view``
        names bound into it), the workspace read-only unless ``view.level`` writes it, and
        everything else but its home read-only unless the level is ``full``; then as the run
        user. The chain's shell stays the namespace's PID 1 (a PID 1 ignores the SIGTERM of a
        graceful stop), so a run's end by a signal reads as exit 128 + N."""
        workspace = self.workspace or Path("/nonexistent")
        namespaces = ["--pid", "--fork", "--kill-child", "--mount-proc", "--"]
        if self.isolation == USERNS:
            outer = ["unshare", "--user", "--map-root-user", "--mount", "--propagation"]
            owner, homes = ("0", "0"), self.state or self.home.parent
            uid, gid = self.user.uid, self.user.gid
            drop = ["unshare", "--user", f"--map-user={uid}", f"--map-group={gid}", "--mount"]
            tail = [*drop, "--", *argv]
        else:
            outer = ["unshare", "--mount", "--propagation"]
            owner, homes = (str(self.user.uid), str(self.user.gid)), self.home.parent
            tail = as_user(self.user, argv)
        writable: list[str] = []
        if view.level == WRITER and view.worktree is not None:
            git = workspace / ".git"  # what a commit in a linked worktree writes, and no more
            for part in ("objects", f"worktrees/{view.worktree.name}", "refs/heads/foldline"):
                writable += [str(git / part)]
            writable += [str(git / "logs" / "refs" / "heads" / "foldline")]
        places = [str(workspace), view.level, str(self.hidden or ""), str(homes), str(self.home)]
        kept = [str(view.worktree or ""), str(view.given or "")]
        script = ["sh", "-c", _RUN_VIEW, "foldline-run", *places, *owner, *kept]
        return [*outer, "private", *namespaces, *script, *writable, "--", *tail]

    def env(self) -> dict[str, str]:
        """What the environment of the run user's processes says about who they are."""
        return {"HOME": str(self.home), "USER": self.user.name, "LOGNAME": self.user.name}

    def run_env(self) -> dict[str, str]:
        """A run's: ``env`` and its own temporary directory, in its own home (ADR 0064)."""
        return {**self.env(), "TMPDIR": str(self.home / "tmp")}

    @property
    def given_root(self) -> Path:
        """Where the files each run is given live (``run_given``): under the homes every
        run's view covers, so a run sees its own only."""
        return self.home.parent / "given"


def for_server(config: ServerConfig) -> Sandbox | None:
    """The sandbox the runs of ``config`` get, or None when they run as the server's own user
    (a non-root server, or ``FOLDLINE_RUN_USER=root``)."""
    user = config.run_user
    if user is None and config.run_isolation == USERNS and config.db_url is None:
        own = RunUser(os.geteuid(), os.getegid(), "the server's own user")
        home = config.state_dir / "home" / str(own.uid)
        return Sandbox(own, config.db.parent, home, USERNS, config.workspace, config.state_dir)
    if user is None or user.is_root:
        return None
    return Sandbox(
        user,
        config.db.parent if config.db_url is None else None,
        config.state_dir / "home" / str(user.uid),
        NAMESPACE,
        config.workspace,
    )


def check(sandbox: Sandbox, wanted: str) -> str:
    """Which isolation runs get here (``wanted``: ``auto``, ``namespace``, ``userns``; ``modes``
    is refused), found by running both chains (the server's tools' and a run's) once as the
    run user, at boot, before anything is served. ``auto`` is a mount and pid namespace per
    run; where the server may make none (a container without CAP_SYS_ADMIN) it does not start:
    runs there could neither be kept apart nor be given a read-only workspace (ADR 0064).

    Raises:
        ConfigError: a tool is missing, ``modes`` was asked for, or a chain fails.
    """
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise ConfigError(
            f"running jobs as {sandbox.user.name} needs {', '.join(missing)} (util-linux);"
            " install it, or set FOLDLINE_RUN_USER=root to run jobs as root"
        )
    if wanted == MODES and sandbox.isolation != USERNS:
        raise ConfigError(
            "FOLDLINE_RUN_ISOLATION=modes: without a mount and pid namespace per run, runs can"
            " neither be kept apart nor read-only agents refused the workspace (ADR 0064);"
            " give the server CAP_SYS_ADMIN (namespace), or set FOLDLINE_RUN_USER=root to run"
            " jobs unisolated as root"
        )
    isolation = USERNS if sandbox.isolation == USERNS else NAMESPACE
    jail = replace(sandbox, isolation=isolation)
    failure = _probe(jail) or _probe_run(jail)
    if failure is not None:
        raise ConfigError(
            f"runs cannot be isolated as {sandbox.user.name} ({failure}); give the server a"
            " mount and pid namespace per run (CAP_SYS_ADMIN), or set FOLDLINE_RUN_USER=root"
            " to run jobs unisolated as root"
        )
    return isolation


def _probe_run(sandbox: Sandbox) -> str | None:
    """Run a run's chain (``wrap_run``, read-only) on a stand-in workspace, state and home:
    None when the run is the run user, in a pid namespace of its own, cannot see the log's
    stand-in nor write the workspace, and can write its home and temporary directory."""
    probe = Path(tempfile.mkdtemp(prefix="foldline-sandbox-run-"))
    try:
        os.chmod(probe, 0o755)
        workspace, state = probe / "workspace", probe / "state"
        (workspace / ".foldline").mkdir(parents=True)
        (workspace / ".foldline" / "log").write_bytes(b"")
        home = state / "home" / "run"
        home.mkdir(parents=True)
        if sandbox.isolation != USERNS:
            os.chown(workspace, sandbox.user.uid, sandbox.user.gid)
        stand_in = replace(
            sandbox,
            hidden=workspace / ".foldline",
            workspace=workspace,
            home=home,
            state=state if sandbox.isolation == USERNS else None,
        )
        own_pids = os.readlink("/proc/self/ns/pid")
        script = (
            f'[ "$(id -u)" = {sandbox.user.uid} ] && [ ! -e .foldline/log ]'
            f' && [ "$(readlink /proc/self/ns/pid)" != "{own_pids}" ]'
            ' && ! touch written 2>/dev/null && touch "$HOME/written" "$TMPDIR/written"'
        )
        answer = subprocess.run(
            stand_in.wrap_run(["sh", "-c", script], RunView(READONLY)),
            cwd=workspace,
            capture_output=True,
            timeout=30,
            check=False,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **stand_in.run_env()},
        )
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if answer.returncode == 0:
        return None
    said = answer.stderr.decode(errors="replace").strip()[:300]
    return f"{sandbox.isolation} run: exit {answer.returncode}{': ' + said if said else ''}"


def _probe(sandbox: Sandbox) -> str | None:
    """Run ``id -u`` through the chain, the log's directory standing in as a probe directory;
    None when the run is the run user and cannot see into it, else what went wrong."""
    probe = Path(tempfile.mkdtemp(prefix="foldline-sandbox-check-"))
    try:
        os.chmod(probe, 0o755)  # the run user may enter the probe but for the mount
        (probe / "log").write_bytes(b"")
        script = f'[ "$(id -u)" = {sandbox.user.uid} ] && [ ! -e "$0/log" ]'
        stand_in = replace(sandbox, hidden=probe)
        if sandbox.state is not None:  # a stand-in state dir too: covered but for its home
            state = Path(f"{probe}.state")
            (state / "home").mkdir(parents=True)
            (state / "home" / "mine").write_bytes(b"")
            (state / "anchor").write_bytes(b"")
            stand_in = replace(stand_in, state=state, home=state / "home")
            script += ' && [ -e "$0.state/home/mine" ] && [ ! -e "$0.state/anchor" ]'
        answer = subprocess.run(
            stand_in.wrap(["sh", "-c", script, str(probe)]),
            cwd="/",
            capture_output=True,
            timeout=30,
            check=False,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
    finally:
        shutil.rmtree(probe, ignore_errors=True)
        shutil.rmtree(f"{probe}.state", ignore_errors=True)
    if answer.returncode == 0:
        return None
    said = answer.stderr.decode(errors="replace").strip()[:300]
    return f"{sandbox.isolation}: exit {answer.returncode}{': ' + said if said else ''}"


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
    for walked in (sandbox.home.parent, sandbox.home.parent.parent):  # home/, the state dir
        mode = stat.S_IMODE(os.stat(walked).st_mode)
        if mode & 0o011 != 0o011:  # made 0700 by an operator: the run could not reach home
            os.chmod(walked, mode | 0o011)
    sandbox.home.mkdir(mode=0o700, exist_ok=True)
    os.chown(sandbox.home, sandbox.user.uid, sandbox.user.gid)
    sandbox.given_root.mkdir(mode=0o711, exist_ok=True)  # each run's own folder inside
    root = os.lstat(workspace)
    if root.st_uid != sandbox.user.uid:
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
