"""Whether a user can reach a state directory, checked at boot.

The state directory holds the log's anchor (``adapters.system.log_anchor``); a server that cannot
enter it boots fine and then answers every request 503 ``anchor ... cannot be read``. So the
boot walks the path from ``/`` and stops with one line naming the first directory in the way
and why (``not traversable by uid 1000 (mode 0700, owner root)``).

The kernel decides, not a reading of mode bits: the check asks ``faccessat(2)`` with the
effective ids and capabilities (``AT_EACCESS``), so ACLs, a capability such as
``CAP_DAC_READ_SEARCH``, a root-squashing NFS server and security modules count as they will
for the server. ``foldline serve`` checks as itself; the front (root) checks as its worker's user,
through the worker's own ``setpriv`` chain (``python -m adapters.services.state_access PATH`` prints
the line, exit 1, or nothing, exit 0).
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from adapters.settings.config_error import ConfigError

if TYPE_CHECKING:
    from adapters.settings.config import RunUser

CHECK_WITHIN_S = 30.0


def _described(path: Path) -> str:
    """``mode 0700, owner root`` of ``path`` (as root sees it: the one asking may not)."""
    try:
        info = os.stat(path)
    except OSError as ex:
        return f"stat: {ex.strerror}"
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = str(info.st_uid)
    return f"mode {stat.S_IMODE(info.st_mode):04o}, owner {owner}"


def barrier(path: Path, *, write: bool) -> str | None:
    """Why this process cannot use the directory ``path``, or None when it can: every
    directory from ``/`` down is traversable, and with ``write`` the directory can be written
    (made, when missing, in its nearest existing parent).

    ``path`` is absolute; a missing ``path`` without ``write`` is a barrier (nothing would
    make it)."""
    uid = os.geteuid()
    here = Path(path.anchor)
    for part in path.parts[1:]:
        if not os.access(here, os.X_OK, effective_ids=True):
            return f"{here} is not traversable by uid {uid} ({_described(here)})"
        below = here / part
        if not os.path.lexists(below):
            if not write:
                return f"{below} does not exist"
            if not os.access(here, os.W_OK | os.X_OK, effective_ids=True):
                return (
                    f"{below} cannot be made: {here} is not writable by uid {uid}"
                    f" ({_described(here)})"
                )
            return None
        here = below
    if not here.is_dir():
        return f"{here} is not a directory"
    if not os.access(here, os.X_OK, effective_ids=True):
        return f"{here} is not traversable by uid {uid} ({_described(here)})"
    if write and not os.access(here, os.W_OK, effective_ids=True):
        return f"{here} is not writable by uid {uid} ({_described(here)})"
    return None


def check(path: Path) -> None:
    """``foldline serve``'s own state directory: this process must enter and write it.

    Raises:
        ConfigError: one line naming the directory in the way and why.
    """
    why = barrier(path, write=True)
    if why is not None:
        raise ConfigError(f"state directory {path} (FOLDLINE_STATE_DIR): {why}")


def check_as(path: Path, user: RunUser) -> None:
    """The front's: its worker (``user``, no supplementary groups) must traverse ``path``
    (the worker's own directory below it is the front's to make).

    Raises:
        ConfigError: one line naming the directory in the way and why, or that the check
            could not run as ``user`` (then neither could the worker).
    """
    from adapters.services.sandbox import as_user  # here: the child imports this module, kept light

    try:
        done = subprocess.run(
            as_user(user, [sys.executable, "-m", "adapters.services.state_access", str(path)]),
            cwd="/",
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            capture_output=True,
            timeout=CHECK_WITHIN_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as ex:
        raise ConfigError(
            f"state directory {path}: cannot check it as uid {user.uid}: {ex}"
        ) from None
    said = done.stdout.decode(errors="replace").strip()
    if done.returncode == 0:
        return
    if done.returncode == 1 and said:
        raise ConfigError(f"state directory {path} (FOLDLINE_STATE_DIR): {said}")
    tail = (done.stderr.decode(errors="replace").strip().splitlines() or [""])[-1][:300]
    raise ConfigError(
        f"state directory {path}: cannot check it as uid {user.uid} (exit {done.returncode}:"
        f" {tail})"
    )


def main(argv: list[str]) -> int:
    (path,) = argv
    why = barrier(Path(path), write=False)
    if why is None:
        return 0
    print(why)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
