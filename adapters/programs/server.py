"""``foldline serve``: the Falcon app under gunicorn (gthread workers).

- One holder name per server instance, made in the master and inherited by every worker, so
  all workers share the workspace lease (design.md §4.2).
- gthread workers: each waiting request or open stream holds a thread, so the default is 32
  threads per worker; ``--timeout`` only watches the worker's main loop, not long streams.
- ``post_worker_init`` wraps the worker's SIGTERM handler: the worker's runs are asked to end
  (a ``finalize`` or a SIGTERM) and given ``FOLDLINE_SERVER_STOP_GRACE_S``, then open streams
  see the shutdown and end cleanly instead of being cut at the graceful timeout
  (design.md §13.3, ADR 0058). gunicorn's graceful timeout is that grace plus
  ``STOP_MARGIN_S``, for the cut-off runs to be reaped and the log closed.
- No control socket: two instances would otherwise share one default path.
- On exit the master releases the lease if this instance holds it.
- The runtime is built once, in the master, with what this program decides for it: the body
  of a push delivery (A2A's, ``payload_for``) and that a holder which lost the lease stops the
  whole server (``stop_the_server``, which only a worker ever runs: only workers hold it).
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import signal
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger as GunicornLogger

from adapters.http.a2a.push import payload_for
from adapters.http.app import create_app
from adapters.services.front_handoff import announce_ready, listen_fd
from adapters.services.runtime import Runtime
from adapters.settings.config import ServerConfig
from adapters.system import logs, tracing
from engine.domain.engine import DomainEngine

log = logging.getLogger("foldline.server")
# What a worker has after its runs' stop grace, before its master kills it: the runs left are
# killed and reaped (one flush tick each), the open streams end, the log is closed. With the
# default grace (8 s) the whole stop fits in the 15 s AgentCore gives a stopping microVM.
STOP_MARGIN_S = 5


def stop_the_server() -> None:
    """A holder that lost the lease stops at once, whole server: its master is told to stop,
    and this worker leaves without a graceful flush into the next holder's log."""
    os.kill(os.getppid(), signal.SIGTERM)
    os._exit(70)


class JsonLinesLogger(GunicornLogger):  # type: ignore[misc]
    """gunicorn's own lines (boot, workers, errors) in foldline's JSON lines (ADR 0059)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(logs.JsonLines())


class FoldlineServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        holder = f"{os.uname().nodename}:{os.getpid()}:{secrets.token_hex(4)}"
        self.runtime = Runtime(
            config, holder, push_payload=payload_for(config), on_lost=stop_the_server
        )
        super().__init__()

    def load_config(self) -> None:
        runtime = self.runtime

        def post_worker_init(worker: Any) -> None:
            previous = signal.getsignal(signal.SIGTERM)

            def opened() -> DomainEngine | None:
                return runtime.engine if runtime.is_open else None

            def on_term(signum: int, frame: Any) -> None:
                # ``shutdown`` follows once the worker's runs ended or their grace is over.
                runtime.stopper.begin(opened, runtime.jobs.owned, runtime.tenure.lost)
                if callable(previous):
                    previous(signum, frame)

            signal.signal(signal.SIGTERM, on_term)

        def worker_exit(server: Any, worker: Any) -> None:
            try:
                runtime.stopper.join()  # the runs' wind-down, at most its grace
                runtime.close()
            finally:
                tracing.shutdown()  # what this worker's spans still queue goes out

        def on_exit(server: Any) -> None:
            try:
                runtime.release_lease()
            finally:
                runtime.close()
                tracing.shutdown()

        # Under a front, the socket it bound for this worker at its boot (its address is
        # config.bind): no other process can have taken the port meanwhile.
        inherited = listen_fd()
        settings = {
            "bind": self.config.bind if inherited is None else f"fd://{inherited}",
            "workers": self.config.workers,
            "worker_class": "gthread",
            "threads": self.config.threads,
            "timeout": 30,
            # gunicorn takes whole seconds.
            "graceful_timeout": math.ceil(self.config.server_stop_grace_s) + STOP_MARGIN_S,
            "keepalive": 5,
            "control_socket_disable": True,
            "post_worker_init": post_worker_init,
            "worker_exit": worker_exit,
            "on_exit": on_exit,
            # Under a front (adapters.front): tell it this worker listens.
            "when_ready": lambda server: announce_ready(),
            "accesslog": None,
            "loglevel": logs.level_name(),  # FOLDLINE_LOG_LEVEL, checked at boot
            "logger_class": JsonLinesLogger,
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return create_app(self.runtime)
