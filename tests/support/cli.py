"""The ``foldline`` command line as a process of its own, for tests."""

from __future__ import annotations

import atexit
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from tests.support.cli_starter import PID_OR_STATUS

ROOT = Path(__file__).resolve().parents[2]


class _Starter:
    """This test process's ``tests.support.cli_starter``, started on first use."""

    def __init__(self) -> None:
        name = f"foldline-cli-starter-{os.getpid()}-{secrets.token_hex(4)}"
        self.address = "\0" + name  # an abstract socket: no file to clean up
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.cli_starter", name],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()  # bounded: the starter exits or says ready
        assert ready == b"ready\n", ready
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()  # the starter's signal to exit
            self.process.wait(10)

    def run(
        self, args: Sequence[str], env: dict[str, str] | None, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``python -m adapters.cli ARGS`` forked by the starter, as ``subprocess.run`` with
        ``capture_output`` would run it: its exit status, its stdout and stderr."""
        argv = [*_COMMAND, *args]
        environ = dict(os.environ if env is None else env)
        request = {"argv": list(args), "env": environ, "cwd": str(ROOT)}
        with (
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
            open(os.devnull, "rb") as stdin,
            socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn,
        ):
            conn.connect(self.address)
            fds = [stdin.fileno(), out.fileno(), err.fileno()]
            socket.send_fds(conn, [json.dumps(request).encode()], fds)
            conn.settimeout(timeout)
            (pid,) = PID_OR_STATUS.unpack(conn.recv(PID_OR_STATUS.size))
            try:
                (status,) = PID_OR_STATUS.unpack(conn.recv(PID_OR_STATUS.size))
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                conn.settimeout(None)
                conn.recv(PID_OR_STATUS.size)  # its handler has reaped it
                raise subprocess.TimeoutExpired(argv, timeout, _read(out), _read(err)) from None
            code = os.waitstatus_to_exitcode(status)
            return subprocess.CompletedProcess(argv, code, _read(out).decode(), _read(err).decode())


def _read(file: IO[bytes]) -> bytes:
    file.seek(0)
    return file.read()


_COMMAND = (sys.executable, "-m", "adapters.cli")
_starter: _Starter | None = None
_starting = threading.Lock()


def _the_starter() -> _Starter:
    global _starter
    with _starting:
        if _starter is None or _starter.process.poll() is not None:
            _starter = _Starter()
        return _starter


def foldline(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``foldline ARGS`` from the checkout in a process of its own; its exit code is the
    caller's to check. Forked by ``tests.support.cli_starter`` (the CLI imported once per test
    process); started afresh after ``prefix`` (e.g. ``nsenter ... --``), which a fork cannot
    enter."""
    if not prefix:
        return _the_starter().run(args, env, timeout)
    return subprocess.run(
        [*prefix, *_COMMAND, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def boot_refusal(workspace: Path, setting: str, value: Path) -> str:
    """Serve ``workspace`` with the one ``setting`` set to ``value``; the boot must fail and
    say why on exactly one line, which is returned."""
    workspace.mkdir(exist_ok=True)
    done = foldline(
        "serve", "--workspace", str(workspace), env={setting: str(value), "PATH": "/usr/bin:/bin"}
    )
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert setting in lines[0], lines
    return lines[0]
