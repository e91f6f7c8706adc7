"""A process that starts ``foldline`` commands by forking, for ``tests.support.cli``.

A fresh ``python -m adapters.cli`` spends most of its 200 ms importing the CLI, and the edit
loop runs it some 260 times. This process imports what that command imports before ``main``
(``adapters.cli.main``) once, then for each request forks a handler, which forks the command
and reports its wait status. The command is a process of its own, as under
``subprocess.run`` with ``capture_output``: the caller's environment and working directory,
files for stdout and stderr (stdin is ``/dev/null``), ``sys.argv``, ``python -m``'s
``__main__`` (run by ``runpy``), the interpreter's exit with its flushes and ``atexit``
handlers, and a wait status that says how it ended. What a fork cannot repeat is the cold
import of the CLI package: the tests that start ``python -m adapters.cli`` themselves (the
console, the golden logs, the backups, the servers) keep that.

    python -m tests.support.cli_starter NAME

``NAME`` is the name of an abstract UNIX socket. A request is one SEQPACKET message: JSON
``{"argv", "env", "cwd"}`` with the command's stdin, stdout and stderr as passed descriptors.
The handler answers the command's pid, then its wait status. The starter exits when its stdin
(a pipe from the test process) closes.
"""

from __future__ import annotations

import json
import os
import runpy
import select
import socket
import struct
import sys

import adapters.cli.main  # noqa: F401  (what ``python -m adapters.cli`` imports first)

PID_OR_STATUS = struct.Struct("q")


def _run_command(request: dict[str, object], fds: list[int]) -> None:
    """Become the command (in the handler's child) and run it as ``python -m`` would."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update(env)
    cwd = request["cwd"]
    assert isinstance(cwd, str)
    os.chdir(cwd)
    # As the interpreter's start would: PYTHONPATH's entries right after the script's folder.
    extra = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[1:1] = [os.path.abspath(entry) for entry in extra]
    argv = request["argv"]
    assert isinstance(argv, list)
    sys.argv = [sys.argv[0], *argv]  # runpy puts the module's file first, as ``-m`` does
    runpy.run_module("adapters.cli", run_name="__main__", alter_sys=True)


def _handle(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    """In the handler: fork the command, answer its pid and then its wait status, exit.
    Returns only in the command's process, with its request and descriptors."""
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        pid = os.fork()
    except BaseException:
        os._exit(1)
    if pid == 0:
        conn.close()
        return json.loads(message), fds
    try:
        for fd in fds:
            os.close(fd)
        conn.send(PID_OR_STATUS.pack(pid))
        _, status = os.waitpid(pid, 0)
        conn.send(PID_OR_STATUS.pack(status))
    finally:
        os._exit(0)


def serve(name: str) -> tuple[dict[str, object], list[int]] | None:
    """Answer requests until stdin closes (None); in a command's process, its request."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind("\0" + name)
    listener.listen(16)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    handlers: set[int] = set()
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
        for pid in list(handlers):  # reap the handlers that are done
            if os.waitpid(pid, os.WNOHANG)[0]:
                handlers.discard(pid)
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
            return None  # the test process is gone or done
        if listener in ready:
            conn, _ = listener.accept()
            pid = os.fork()
            if pid == 0:
                listener.close()
                return _handle(conn)
            conn.close()
            handlers.add(pid)


if __name__ == "__main__":
    command = serve(sys.argv[1])
    if command is not None:
        _run_command(*command)  # ends in SystemExit, the interpreter's exit of the command
