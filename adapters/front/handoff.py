"""The worker's side of the front: ``/ready`` once it listens (and, later, ``/notify``).

Active only in a worker the front started (``FOLDLINE_FRONT_URL`` and ``FOLDLINE_FRONT_TOKEN``
in its environment); a plain ``foldline serve`` does nothing here.
"""

from __future__ import annotations

import logging
import os
import urllib.request
from collections.abc import Mapping

log = logging.getLogger("foldline.front")


def front_of(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """The front's loopback URL and this boot's token, or None outside a front."""
    env = os.environ if env is None else env
    url, token = env.get("FOLDLINE_FRONT_URL"), env.get("FOLDLINE_FRONT_TOKEN")
    return (url, token) if url and token else None


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
