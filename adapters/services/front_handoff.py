"""The worker's side of the front: its bound socket, ``/ready``, ``/notify`` for an owed reply.

Active only in a worker the front started (``FOLDLINE_FRONT_URL`` and ``FOLDLINE_FRONT_TOKEN``
in its environment); a plain ``foldline serve`` does nothing here.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from collections.abc import Mapping

from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.errors import EngineError

log = logging.getLogger("foldline.front")


def front_of(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """The front's loopback URL and this boot's token, or None outside a front."""
    env = os.environ if env is None else env
    url, token = env.get("FOLDLINE_FRONT_URL"), env.get("FOLDLINE_FRONT_TOKEN")
    return (url, token) if url and token else None


def listen_fd(env: Mapping[str, str] | None = None) -> int | None:
    """The socket the front bound for this worker (``FOLDLINE_FRONT_LISTEN_FD``), or None
    outside a front: gunicorn listens on it instead of binding the address itself."""
    env = os.environ if env is None else env
    text = env.get("FOLDLINE_FRONT_LISTEN_FD", "")
    return int(text) if front_of(env) is not None and text.isdigit() else None


def announce_ready() -> None:
    """Tell the front this worker listens (push, no probe); a front that does not hear it
    in 30 s answers 503 for good."""
    front = front_of()
    if front is None:
        return
    url, token = front
    request = urllib.request.Request(
        f"{url}/ready", data=b"", method="POST", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10):
            pass
    except OSError as ex:
        log.error("worker: the front did not take /ready: %s", ex)


def hook_in_front(env: Mapping[str, str] | None = None) -> bool:
    """Whether this worker's finished jobs go to the front's hook (the front has one)."""
    env = os.environ if env is None else env
    return front_of(env) is not None and env.get("FOLDLINE_FRONT_NOTIFY") == "1"


def notify_front(
    engine: DomainEngine,
    job_id: str,
    session_id: str,
    status: str,
    result: str,
    timeout_s: float,
) -> None:
    """Hand a finished job to the front's hook, recording its start before the hand-off and
    its end from the front's answer: at most once, and a hand-off cut off (the front or this
    worker gone) leaves a start without an end, reported as a lost notification. Called for
    the same jobs as ``adapters.services.notify``: an owed ``/invocations`` reply only."""
    front = front_of()
    assert front is not None
    url, token = front
    try:
        engine.handle(c.RecordNotifyStarted(job_id=job_id, pid=0))  # the hook is the front's
    except EngineError as ex:  # at most once: no record, no hand-off
        log.error("notify hand-off for %s not recorded, not sent: %s", job_id, ex)
        return
    body = json.dumps({"id": job_id, "session": session_id, "status": status, "text": result})
    request = urllib.request.Request(
        f"{url}/notify",
        data=body.encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s + 30) as answer:
            outcome = json.loads(answer.read())
        engine.handle(
            c.RecordNotifyFinished(
                job_id=job_id,
                exit_code=outcome["exit_code"],
                ms=outcome["ms"],
                stdout_tail=outcome["stdout_tail"],
                stderr_tail=outcome["stderr_tail"],
            )
        )
    except (OSError, ValueError, KeyError, TypeError, EngineError) as ex:
        log.error("notify hand-off for %s: no end recorded (lost): %s", job_id, ex)
