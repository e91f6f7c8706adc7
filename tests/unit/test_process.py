"""``engine.process.pid``: this process's id without a system call, right in forked children."""

from __future__ import annotations

import os

from engine import process


def test_pid_is_this_process() -> None:
    assert process.pid() == os.getpid()


def test_a_forked_child_knows_its_own_pid() -> None:
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report what the module says, and exit at once
        try:
            os.write(write, f"{process.pid()} {os.getpid()}".encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        said = os.read(read, 64).decode().split()
    finally:
        os.close(read)
        os.waitpid(child, 0)
    assert said == [str(child), str(child)]
    assert process.pid() == os.getpid() != child
