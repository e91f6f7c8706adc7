"""The front's one session: its id, the first request's set-up, the worker's life and end.

States, each entered once: no id yet; an id claimed (any other is 409 from then on); serving
(the directory built, the view set, the worker ready); or failed for good (the view setup
failed, or the worker was not ready in 30 s: 503 with the reason, the worker never started
again). A base that is not a mount point yet (503) and a failed directory build (500) leave
the state as it was: the next request tries again.

``/ping`` is answered from two sources, the worker's status and the front's own notify hooks,
and its ``time_of_last_update`` is when the status the front answers last changed: never
restamped while the status stays (AgentCore reads a moving stamp as activity, and a session
whose stamp keeps moving lives to its maximum lifetime).
"""

from __future__ import annotations

import json
import logging
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping

from adapters.front import session_dir, worker
from adapters.front.settings import STOP_WITHIN_S, FrontConfig

log = logging.getLogger("foldline.front")
Answer = tuple[int, str]  # status, error text
STATUSES = ("Healthy", "HealthyBusy")


class Front:
    def __init__(
        self,
        config: FrontConfig,
        env: Mapping[str, str],
        listener: socket.socket,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config  # its worker_port is the one ``listener`` is bound to
        self.env = dict(env)
        self.listener = listener
        self.token = secrets.token_urlsafe(32)  # per boot: the worker's /ready and /notify
        self.internal_url = ""  # the loopback server's, set before the first request
        self.sid: str | None = None
        self.failed: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.ready = threading.Event()
        self.serving = False
        self.stop_asked = False
        self.ended = threading.Event()
        self.exit_code = 0
        self._claim = threading.Lock()
        self._setup = threading.Lock()
        self._work = threading.Condition()
        self._hooks = 0
        self._clock = clock
        self._stamp = threading.Lock()
        self._answered = "Healthy"  # the status /ping last answered, and since when
        self._changed_at = clock()
        self._stop_deadline = 0.0

    # -- the session id ----------------------------------------------------------------
    def claim(self, sid: str) -> bool:
        """Take ``sid`` as this front's, or say whether it already is."""
        with self._claim:
            if self.sid is None:
                self.sid = sid
                log.warning("front: serving session %s", sid)
            return self.sid == sid

    # -- the first request's set-up -----------------------------------------------------
    def activate(self) -> Answer | None:
        """None once the worker serves, else the answer this request gets."""
        if self.serving:
            return None
        with self._setup:
            if self.failed is not None:
                return 503, self.failed
            if self.serving:
                return None
            if self.stop_asked:
                return 503, "the front is stopping"
            return self._set_up()

    def _set_up(self) -> Answer | None:
        config, sid = self.config, self.sid
        assert sid is not None
        try:
            mounted = session_dir.is_mount_point(config.base)
        except OSError as ex:
            return 503, f"mountinfo unreadable: {ex}"
        if not mounted:
            return 503, (
                f"{config.base} is not a mount point (yet): the session file system is not"
                " mounted; retry with the same session id"
            )
        try:
            session_dir.ensure(config.base, sid, config.run_user)
        except OSError as ex:
            log.error("front: session directory for %s not made: %s", sid, ex)
            return 500, f"the session's directory could not be made: {ex}"
        listener = self.listener
        env = worker.worker_env(
            config, sid, self.internal_url, self.token, self.env, listener.fileno()
        )
        log.warning(
            "front: session %s's worker on 127.0.0.1:%d, its state in %s",
            sid,
            config.worker_port,
            config.worker_state(sid),
        )
        process, verdict = worker.start(config, sid, env, listener)
        if verdict != "ok":
            process.wait(timeout=STOP_WITHIN_S)
            self.failed = f"view setup failed, not serving on this runtime: {verdict}"
            log.error("front: %s", self.failed)
            return 503, self.failed
        self.process = process
        threading.Thread(target=self._watch, args=(process,), daemon=True).start()
        within = config.ready_within_s
        deadline = time.monotonic() + within
        while not self.ready.wait(0.1):
            if process.poll() is not None:
                return 503, f"the worker exited before it was ready (exit {process.returncode})"
            if time.monotonic() > deadline:
                self.failed = (
                    f"the worker was not ready within {within:g} s, not serving on this runtime"
                )
                log.error("front: %s", self.failed)
                process.kill()
                return 503, self.failed
        self.serving = True
        return None

    def token_ok(self, token: str) -> bool:
        """This boot's token, compared in constant time (the agent can read it: its user is
        the worker's)."""
        return secrets.compare_digest(token.encode(), self.token.encode())

    def on_ready(self, token: str) -> bool:
        """The worker's ``/ready`` (only while it starts, with this boot's token)."""
        if not self.token_ok(token):
            return False
        if self.process is None or self.serving or self.failed is not None:
            return False
        self.ready.set()
        return True

    # -- the worker's end and the front's --------------------------------------------------
    def _watch(self, process: subprocess.Popen[bytes]) -> None:
        code = process.wait()
        if self.failed is not None and not self.serving:
            return  # killed for not being ready: the front stays, answering 503
        if self.stop_asked:
            self.exit_code = code if code >= 0 else 1
        else:  # an exit nobody asked for is a failure, whatever its code
            self.exit_code = code if code > 0 else 1
            log.error("front: the worker exited (%s): the front ends", code)
        self.ended.set()

    def stop(self, signum: int) -> None:
        """SIGTERM or SIGINT: the worker gets it (its graceful stop releases the lease)."""
        if not self.stop_asked:
            self._stop_deadline = time.monotonic() + STOP_WITHIN_S
        self.stop_asked = True
        process = self.process
        if process is None or process.poll() is not None:
            self.ended.set()
            return
        process.send_signal(signum)

    def wind_down(self) -> int:
        """After ``ended``: the notify work still running gets what is left of the budget, then
        the worker (if still there) is killed. The front's exit code."""
        deadline = self._stop_deadline or time.monotonic() + STOP_WITHIN_S
        with self._work:
            if self._hooks:
                left = max(0.0, deadline - time.monotonic())
                log.warning("front: waiting up to %.0f s for %d notify hook(s)", left, self._hooks)
            while self._hooks and time.monotonic() < deadline:
                self._work.wait(deadline - time.monotonic())
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        return self.exit_code

    def wait_for_end(self) -> int:
        """Block until the worker ended (or a stop without one). A stop has one 30 s budget
        for the worker's graceful end and the front's notify work: the worker is killed when
        it is spent."""
        while not self.ended.wait(0.5):
            process = self.process
            if self.stop_asked and time.monotonic() > self._stop_deadline and process:
                log.error("front: the worker did not stop within 30 s: killed")
                process.kill()
        return self.wind_down()

    # -- health -------------------------------------------------------------------------
    def hook_started(self) -> None:
        with self._work:
            self._hooks += 1

    def hook_ended(self) -> None:
        with self._work:
            self._hooks -= 1
            self._work.notify_all()

    def ping(self) -> tuple[int, bytes]:
        """``Healthy`` until the worker is ready, then the worker's status (none in 5 s:
        ``HealthyBusy``); ``HealthyBusy`` while a hook runs. The stamp is the front's: when the
        status it answers last changed (a worker answer it cannot read passes as it is)."""
        with self._work:
            hooks = self._hooks
        status = "HealthyBusy" if hooks or self.serving else "Healthy"
        if self.serving and not hooks:
            answered = worker.ping(self.config)
            if answered is not None:
                said = _status_of(*answered)
                if said is None:
                    return answered
                status = said
        body = {"status": status, "time_of_last_update": int(self._stamped(status))}
        return 200, json.dumps(body).encode()

    def _stamped(self, status: str) -> float:
        """When the answered status last changed, ``status`` being answered now."""
        with self._stamp:
            if status != self._answered:
                self._answered = status
                # Never back: a clock stepped back must not undo a change.
                self._changed_at = max(self._changed_at, self._clock())
            return self._changed_at


def _status_of(code: int, body: bytes) -> str | None:
    """The status of a worker's ``/ping`` answer, or None when it is not one."""
    try:
        said = json.loads(body).get("status") if code == 200 else None
    except (ValueError, AttributeError):
        return None
    return said if said in STATUSES else None


def forward_signals(front: Front) -> None:
    """SIGTERM and SIGINT stop the worker (the main thread's handlers)."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: front.stop(number))


__all__ = ["Front", "forward_signals"]
