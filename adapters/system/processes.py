"""Child processes: gated start, identity (pid + start token) and whole-group kills.

A run is spawned *gated*: the shell reads one line from its stdin before it execs the command,
and only ``go`` lets it through. The job is recorded (accepted and started, with pid and start
token) in between; only then is ``go`` written, followed by the prompt, which the command reads
as its stdin (``read`` consumes a pipe byte by byte, so nothing of the prompt is lost). A
dispatch that fails leaves no job row, and a job row never names a process that could have run
without being recorded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Copied from the server's environment into every run; everything else is left out, but for
# the names FOLDLINE_RUN_ENV adds (``adapters.settings.run_env``). A notify hook gets it all (its
# caller passes the whole environment as ``base``).
ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "FOLDLINE_DEMO_DELAY_S",
)
_GATE = 'IFS= read -r go || exit 125; [ "$go" = go ] || exit 125; exec sh -c "$0"'


def start_token(pid: int) -> str:
    """The kernel's start time of ``pid`` (clock ticks since boot): with the pid, an identity
    that a reused pid cannot fake. Empty if the process is gone, or dead and not yet reaped
    (a zombie runs nothing: continuing it would continue nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat.rpartition(")")[2].split()
    return "" if fields[0] in ("Z", "X") else fields[19]


def is_alive(pid: int, token: str) -> bool:
    """True if ``pid`` runs and is the very process recorded with ``token``."""
    return pid > 1 and bool(token) and start_token(pid) == token


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a whole process group we created (pgid == pid); gone already is fine."""
    if pid > 1 and pid != os.getpid():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)


def child_env(extra: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: the allowlisted part of the server's environment) plus ``extra``,
    whose values win."""
    if base is None:
        base = {name: os.environ[name] for name in ENV_ALLOWLIST if name in os.environ}
    return {**base, **extra}


@dataclass
class GatedProcess:
    """A ``sh -c`` child in its own process group, waiting for ``open_gate``."""

    process: subprocess.Popen[bytes]
    token: str

    @property
    def pid(self) -> int:
        return self.process.pid

    @staticmethod
    def gated_input(stdin: bytes) -> bytes:
        """What to write to the child so that it runs with ``stdin`` as its input."""
        return b"go\n" + stdin

    def open_gate(self, stdin: bytes, keep_open: bool = False) -> None:
        """Let the command run with ``stdin`` as its input (blocks until it is all written).
        ``keep_open``: its stdin stays open for more (a run's live channel, ADR 0038)."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write(self.gated_input(stdin))
            self.process.stdin.flush()
        if not keep_open:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()

    def abandon(self) -> None:
        """Never run it: close the gate unopened, kill the group and reap."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        kill_group(self.pid)
        self.process.wait(timeout=10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def spawn_gated(
    command: str,
    cwd: Path,
    env: Mapping[str, str],
    base: Mapping[str, str] | None = None,
    wrap: Callable[[list[str]], list[str]] | None = None,
) -> GatedProcess:
    """Start ``sh -c command`` stopped at its gate (see the module docstring), in its own
    process group, every stdio piped, with ``base`` (default: the allowlisted environment; a
    run's adds ``FOLDLINE_RUN_ENV``'s names, a notify hook's is the whole) plus ``env``.
    ``wrap`` turns the argv into the one that runs it as another user
    (``adapters.services.sandbox``); every program it puts in front execs the next, so the pid and
    the start token recorded are the run's own.

    Raises:
        OSError: the child could not be created.
    """
    argv = ["sh", "-c", _GATE, command]
    process = subprocess.Popen(
        argv if wrap is None else wrap(argv),
        cwd=cwd,
        env=child_env(env, base),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, killed as a whole
    )
    return GatedProcess(process, start_token(process.pid))
