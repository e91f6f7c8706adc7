"""The worker's view: run as root in the worker's new mount namespace, then exec the worker.

``python -m adapters.front.view FD BASE SID WORKSPACE -- ARGV...`` runs under
``unshare --mount --propagation private`` (so neither the host's nor the front's view changes):

1. ``mkdir -p WORKSPACE``, then ``mount --bind BASE/SID WORKSPACE``;
2. ``umount -l BASE`` while mountinfo still lists it, at most 5 rounds (a base can carry
   stacked mounts and each ``umount`` pops only the top one);
3. check: BASE is no mount point and ``BASE/SID`` no longer visible.

Each command has a timeout. The outcome goes to FD (``ok`` or ``failed: why``) before anything
of the worker runs; on ``ok`` the helper changes to WORKSPACE and execs ARGV (the run user's
``setpriv`` chain), whose processes, the runs included, inherit this view. Fail closed: on any
failure nothing is exec'd, and the front never starts a worker again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from adapters.front.session_dir import mount_points
from adapters.front.settings import COMMAND_WITHIN_S

ROUNDS = 5


class ViewFailed(Exception):
    """A step of the view setup failed: the worker must not start."""


def _command(argv: Sequence[str]) -> None:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, timeout=COMMAND_WITHIN_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as ex:
        raise ViewFailed(f"{' '.join(argv)}: {ex}") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[:300]
        raise ViewFailed(f"{' '.join(argv)}: exit {done.returncode}: {said}")


def set_up(base: Path, sid: str, workspace: Path) -> None:
    """Steps 1 to 3 in this process's (new) mount namespace.

    Raises:
        ViewFailed: a step or the final check failed.
    """
    source = base / sid
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except OSError as ex:
        raise ViewFailed(f"mkdir -p {workspace}: {ex}") from None
    _command(["mount", "--bind", str(source), str(workspace)])
    for _ in range(ROUNDS):
        if str(base) not in mount_points():
            break
        _command(["umount", "-l", str(base)])
    left = mount_points().count(str(base))
    if left:
        raise ViewFailed(f"{base} still has {left} mount(s) after {ROUNDS} x umount -l")
    if source.exists():
        raise ViewFailed(f"{source} is still visible after the base was unmounted")


def main(argv: Sequence[str]) -> int:
    fd_text, base, sid, workspace, separator, *command = argv
    fd = int(fd_text)
    if separator != "--" or not command:
        os.write(fd, b"failed: bad arguments to the view helper\n")
        return 2
    try:
        set_up(Path(base), sid, Path(workspace))
        os.chdir(workspace)
    except (ViewFailed, OSError) as ex:
        os.write(fd, f"failed: {ex}\n".encode())
        return 3
    os.write(fd, b"ok\n")
    os.close(fd)
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
