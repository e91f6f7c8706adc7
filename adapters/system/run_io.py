"""A run's pipes and its exit, watched by one thread.

The runner needs the child's stdout (streamed as output, then the result), its stderr (the tail
of a failed run) and the moment it exits (a short run is recorded at once, not at the next
flush tick). One thread waits on all three at once: both pipes and, on Linux, a pidfd of the
child, which becomes readable when the child ends. Starting threads is a large part of a short
run's cost (three of them, one for each, before ADR 0027). The exit is noted the moment it
happens even while a grandchild keeps the pipes open; where ``os.pidfd_open`` is missing, a
second thread blocks in ``wait`` instead.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import threading

_CHUNK = 65536


class RunIO(threading.Thread):
    """Drains stdout and stderr into memory and sets ``ended`` when the process exits."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        super().__init__(daemon=True, name=f"run-io-{process.pid}")
        assert process.stdout is not None and process.stderr is not None
        self._process = process
        self._lock = threading.Lock()
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        self._taken = 0
        self.ended = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._selector.register(process.stdout.fileno(), selectors.EVENT_READ, self._out)
        self._selector.register(process.stderr.fileno(), selectors.EVENT_READ, self._err)
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):  # not Linux, or the child is already reaped
            threading.Thread(target=self._wait, daemon=True).start()
        else:
            self._selector.register(self._pidfd, selectors.EVENT_READ, None)

    def _wait(self) -> None:
        self._process.wait()
        self.ended.set()

    def run(self) -> None:
        selector, pipes = self._selector, 2
        try:
            while pipes:
                for key, _ in selector.select():
                    if key.data is None:  # the pidfd: the child has exited
                        self._close_pidfd()
                        self.ended.set()
                        continue
                    chunk = os.read(key.fd, _CHUNK)
                    if chunk:
                        with self._lock:
                            key.data.append(chunk)
                    else:
                        selector.unregister(key.fd)
                        pipes -= 1
            if self._pidfd is not None:  # both pipes closed before the child exited
                self._process.wait()
                self._close_pidfd()
                self.ended.set()
        finally:
            if self._pidfd is not None:  # failed reading: still note the exit
                self._close_pidfd()
                threading.Thread(target=self._wait, daemon=True).start()
            selector.close()

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def take_new(self) -> bytes:
        """Stdout written since the last call."""
        with self._lock:
            new = b"".join(self._out[self._taken :])
            self._taken = len(self._out)
        return new

    def stdout(self) -> bytes:
        with self._lock:
            return b"".join(self._out)

    def stderr(self) -> bytes:
        with self._lock:
            return b"".join(self._err)
