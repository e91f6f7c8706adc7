"""The one way foldline runs git: as the run user, without hooks, with a timeout.

The workspace belongs to the run user and is agent-controlled, so its ``.git/config`` and
``.git/hooks`` are written by whoever the agent is. A server running git there as root would run
the agent's hooks and fsmonitor command as root, and would follow paths the agent planted. Every
command therefore goes through ``Git.run``: ``wrap`` turns the argv into one run as the run user
(so whatever git still runs from the repository's config, such as a filter driver, runs with the
agent's own rights), hooks and fsmonitor are switched off on the command line (which overrides
the repository's config), and the environment is built from nothing so that no ``GIT_DIR``,
``GIT_INDEX_FILE`` or ``GIT_WORK_TREE`` of the server's leaks in.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Command-line config wins over every config file, the repository's included. No
# safe.directory: run through `wrap`, git is the repository's owner and its ownership check
# passes; a root server running git on the run user's repository without `wrap` is refused by
# git, which is the point of that check.
FIXED_OPTIONS = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# git dies with the thread that started it: a server killed mid-integrate must not leave a git
# writing the workspace while the next server's recovery decides what the tree holds. Set once
# outside the run user's chain and once inside it (a change of uid or user namespace clears it);
# util-linux's setpriv, there wherever runs are isolated. Without it (a plain non-root server on
# a machine without util-linux) git runs as it is.
DIE_WITH_PARENT = ["setpriv", "--pdeathsig=KILL", "--"] if shutil.which("setpriv") else []
STDERR_TAIL = 2000
GRACE_S = 2.0


class GitFailed(Exception):
    """A git command failed or timed out; ``str()`` names the command and the tail of stderr."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


class NotARepository(GitFailed):
    """The workspace is not the top of a git work tree with at least one commit."""


@dataclass(frozen=True)
class Git:
    """How to run git: ``wrap`` (to the run user), extra ``env``, and a per-command timeout.

    ``env`` is added to a minimal environment (``PATH``, ``LC_ALL=C``,
    ``GIT_TERMINAL_PROMPT=0``); ``HOME`` is only set when given here, so a root server's own
    ``~/.gitconfig`` never applies to the run user's repository.
    """

    wrap: Callable[[list[str]], list[str]] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 120.0

    def run(
        self,
        args: Sequence[str],
        cwd: Path,
        *,
        input: bytes | None = None,
        index: Path | None = None,
        check: bool = True,
    ) -> bytes:
        """Run ``git <fixed options> *args`` in ``cwd`` and return its stdout.

        ``index`` becomes ``GIT_INDEX_FILE``: the scratch index that lets foldline compute and
        write trees without touching the workspace's real index.

        A command that outlives ``timeout_s`` gets SIGTERM first, with its whole process group
        (filters, helpers): git removes its ``*.lock`` files on SIGTERM but cannot on SIGKILL,
        and a lock left in the workspace's ``.git`` would block every later command there,
        while the server may not delete it itself. SIGKILL follows after ``GRACE_S``.

        Raises:
            GitFailed: git exited nonzero (only with ``check``), could not start (``cwd``
                missing, git not installed) or outlived ``timeout_s``.
        """
        argv = [*DIE_WITH_PARENT, "git", *FIXED_OPTIONS, *args]
        if self.wrap is not None:
            argv = [*DIE_WITH_PARENT, *self.wrap(argv)]
        try:
            child = subprocess.Popen(
                argv,
                cwd=cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._environment(index),
                start_new_session=True,
            )
        except OSError as ex:
            raise GitFailed(f"{_named(args)} could not start in {cwd}: {ex}") from ex
        with child:
            try:
                stdout, stderr = child.communicate(input or b"", timeout=self.timeout_s)
            except subprocess.TimeoutExpired as ex:
                _stop(child)
                raise GitFailed(
                    f"{_named(args)} timed out after {self.timeout_s:g}s in {cwd}",
                    _tail(ex.stderr),
                ) from ex
        if check and child.returncode != 0:
            tail = _tail(stderr)
            raise GitFailed(f"{_named(args)} exited {child.returncode} in {cwd}: {tail}", tail)
        return stdout

    def _environment(self, index: Path | None) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", DEFAULT_PATH),
            "LC_ALL": "C",  # messages are parsed (apply's conflicts): never translated
            "GIT_TERMINAL_PROMPT": "0",
            # No editor, pager or askpass can be started by a command that would want one.
            "GIT_EDITOR": "true",
            "GIT_PAGER": "cat",
            # Read-only commands must not refresh (write) the real index behind our back.
            "GIT_OPTIONAL_LOCKS": "0",
        }
        env.update(self.env)
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        return env


def _stop(child: subprocess.Popen[bytes]) -> None:
    """End a timed-out git and everything it started, politely first (see ``Git.run``)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM)
    try:
        child.communicate(timeout=GRACE_S)
        return
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    # Not communicate(): a process that left the group could hold the pipes open for ever.
    child.wait()


def _named(args: Sequence[str]) -> str:
    """The command as a reader recognises it, without the fixed options."""
    return "git " + " ".join(args[:4]) + (" ..." if len(args) > 4 else "")


def _tail(stderr: bytes | str | None) -> str:
    if stderr is None:
        return ""
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    return text.strip()[-STDERR_TAIL:]
