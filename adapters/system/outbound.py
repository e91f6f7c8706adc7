"""Outbound HTTP with one deadline for the whole exchange (push webhooks, ``url`` file parts).

urllib's ``timeout`` bounds each socket wait, not the request: a peer that sends its status
line or its body a byte every few seconds would hold a thread for ever. Each connection made
here arms a timer at connect that shuts its socket down at the deadline, which ends any read
still waiting; the caller sees an ``OSError`` (or a short body) and says the request took too
long. Proxies from the environment are never used: the address the URL policy judged is the
one called.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
import urllib.request
from functools import partial
from typing import Any


class _Watched:
    """A connection whose socket is shut down at ``deadline`` (``time.monotonic``)."""

    sock: Any
    _deadline: float

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self._watched = self.sock  # the response's reads use it after urllib drops ``sock``
        self._timer = threading.Timer(max(0.0, self._deadline - time.monotonic()), self._cut)
        self._timer.daemon = True
        self._timer.start()

    def _cut(self) -> None:
        with contextlib.suppress(OSError):
            self._watched.shutdown(socket.SHUT_RDWR)


class _HTTP(_Watched, http.client.HTTPConnection):
    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline


class _HTTPS(_Watched, http.client.HTTPSConnection):
    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline


class _Deadline(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    def __init__(self, deadline: float) -> None:
        urllib.request.HTTPHandler.__init__(self)
        urllib.request.HTTPSHandler.__init__(self)
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(partial(_HTTP, deadline=self.deadline), req)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = partial(_HTTPS, deadline=self.deadline)
        return self.do_open(connection, req, context=self._context)  # type: ignore[attr-defined]


def opener(deadline: float, *handlers: urllib.request.BaseHandler) -> urllib.request.OpenerDirector:
    """An opener whose every connection (a redirect's included) ends at ``deadline``
    (``time.monotonic``). The caller keeps the same deadline to tell a cut-off body from a
    short one: a deadline of its own, taken a moment later, could still lie ahead when the
    cut has already ended the read."""
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), _Deadline(deadline), *handlers
    )
