"""``foldline console DB``: the console's pages over any current log, read-only, for auditors.

The file is opened with SQLite's read-only flag (``open_log_readonly``): no lease, no runner,
no recovery, no migration, nothing written. The app serves the routes the table
(``adapters.http.routes``) gives a read-only resource: the console and the ``/v1`` reads the
pages use (stream histories, the events feed, machines); the controls, ``/invocations`` and
A2A are not mounted at all, and the page hides its buttons. It asks for no token, so it
binds only to a loopback address (``check_loopback``): an auditor on this machine.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import falcon
from gunicorn.app.base import BaseApplication

from adapters.http import app as http_app
from adapters.http import auth, errors
from adapters.http.routes import ROUTES
from adapters.http.routing import Routes
from adapters.settings.config_error import ConfigError
from engine import open_notifier
from engine.domain import MACHINES
from engine.log import Log, open_log_readonly
from engine.notifier import Notifier
from projections import default_projections
from projections.reads import ReadModels


@dataclass(frozen=True)
class ReadOnlyConfig:
    db: Path | str  # a log file, or a postgresql:// URL
    sse_keepalive_s: float = 15.0


class ReadOnlyRuntime:
    """The read port of the HTTP resources (``adapters.http.ports.ReadRuntime``) over a
    read-only log.

    Opened per process on first use (never before gunicorn forks), with a notifier so that the
    events feed follows commits made by a server writing the same file.
    """

    def __init__(self, config: ReadOnlyConfig) -> None:
        self.config = config
        self.shutdown = threading.Event()
        self._log: Log | None = None
        self._notifier: Notifier | None = None
        self._pid = -1
        self._lock = threading.Lock()
        self.open_streams = 0

    def _opened(self) -> Log:
        if self._log is None or self._pid != os.getpid():
            with self._lock:
                if self._log is None or self._pid != os.getpid():
                    log = open_log_readonly(self.config.db, MACHINES, default_projections())
                    self._notifier = open_notifier(log)
                    self._log, self._pid = log, os.getpid()
        return self._log

    @property
    def reads(self) -> ReadModels:
        return ReadModels(self._opened())

    @property
    def events(self) -> Log:
        return self._opened()

    def ending(self) -> bool:
        """What follows the feed asks: only the stop ends it (nothing else does)."""
        return self.shutdown.is_set()

    @contextlib.contextmanager
    def open_stream(self) -> Iterator[None]:
        self.open_streams += 1
        try:
            yield
        finally:
            self.open_streams -= 1

    def close(self) -> None:
        self.shutdown.set()
        if self._log is not None and self._pid == os.getpid():
            if self._notifier is not None:
                self._notifier.stop()
            self._log.close()
        self._log = None


def check_log(db: Path | str) -> int:
    """Open the file read-only once, before serving; returns its head.

    Raises:
        EngineError: not a log, or one that needs a migration first (NeedsMigration).
    """
    log = open_log_readonly(db, MACHINES, default_projections())
    try:
        return log.head()
    finally:
        log.close()


def check_loopback(bind: str) -> str:
    """``bind`` if its host is a loopback address (or ``localhost``): this server is open.

    Raises:
        ConfigError: any other host, named.
    """
    host = bind.rpartition(":")[0].strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            f"bind {bind!r}: the read-only console asks for no token, so it binds only to"
            " loopback (127.0.0.1 or [::1]); reach it from elsewhere through an SSH tunnel"
        )
    return bind


def create_readonly_app(
    runtime: ReadOnlyRuntime, routes: Routes = ROUTES
) -> falcon.App[falcon.Request, falcon.Response]:
    """The routes of the table the read-only console serves, each with its read-only
    resource; every caller is the operator (``auth.OpenReads``)."""
    served = routes.read_only()
    middleware: list[Any] = [
        errors.ErrorSurface(served.surfaces()),
        http_app.WorkerHeader(),
        auth.OpenReads(),
    ]
    app = falcon.App(middleware=middleware)
    served.mount_read_only(app, runtime)
    # The same error shapes as the full server (one table, no stack traces to clients).
    app.set_error_serializer(http_app._falcon_error)
    app.add_error_handler(Exception, http_app._unexpected)
    app.add_error_handler(errors.HANDLED, errors.handle)
    return app


class ConsoleServer(BaseApplication):  # type: ignore[misc]
    """One gthread worker: auditors are few, and each open events feed holds a thread."""

    def __init__(
        self, db: Path | str, bind: str, threads: int = 16, keepalive_s: float = 15.0
    ) -> None:
        self.bind, self.threads = bind, threads
        self.runtime = ReadOnlyRuntime(ReadOnlyConfig(db, keepalive_s))
        super().__init__()

    def load_config(self) -> None:
        runtime = self.runtime

        def worker_exit(server: Any, worker: Any) -> None:
            runtime.close()

        def post_worker_init(worker: Any) -> None:
            previous = signal.getsignal(signal.SIGTERM)

            def on_term(signum: int, frame: Any) -> None:
                runtime.shutdown.set()  # open feeds end cleanly instead of being cut
                if callable(previous):
                    previous(signum, frame)

            signal.signal(signal.SIGTERM, on_term)

        settings = {
            "bind": self.bind,
            "workers": 1,
            "worker_class": "gthread",
            "threads": self.threads,
            "timeout": 30,
            "graceful_timeout": 5,
            "control_socket_disable": True,
            "post_worker_init": post_worker_init,
            "worker_exit": worker_exit,
            "accesslog": None,
            "loglevel": "warning",
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return create_readonly_app(self.runtime)
