"""The push deliverer (ADR 0039): sends what the outbox owes, while this server holds the lease.

Every gunicorn worker of the lease holder runs one deliverer thread; the log decides between
them. A delivery is claimed (``push.attempt_started``) before its request goes out and its
outcome recorded after (``push.delivered``, ``push.failed`` with the next due time, or
``push.dead``), so a ``kill -9`` between the two leaves a claim the next server takes over:
at least once, never silently lost. The thread wakes on any commit (a new transition may owe
a delivery) and when the next retry falls due, on the engine's clock; ``step`` is one pass,
which tests drive by hand on an injected clock.

While anything is owed, the worker counts one piece of work on the busy board, so ``/ping``
says ``HealthyBusy`` without reading the log (``adapters.services.busy``).
"""

from __future__ import annotations

import http.client
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from adapters.services import job_trace
from adapters.services.busy import BusyBoard
from adapters.system import outbound, tracing
from adapters.system.url_policy import UrlPolicy, UrlRefused
from engine.clock import format_time, parse_time
from engine.domain import push as push_
from engine.domain.engine import DomainEngine
from engine.domain.rows import DeliveryRow
from engine.errors import EngineError
from projections import queries

log = logging.getLogger("foldline.push")

Payload = Callable[[Any, DeliveryRow], bytes]
"""The body a delivery sends, built from the read models (``adapters.http.a2a.push``)."""

EVENT_ID_HEADER = "X-Foldline-Event-Id"  # the delivery id: what a receiver dedupes by
MAX_WAIT_S = 5.0  # a pass at least this often: a claim run out needs no commit to be seen


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a new URL to call: the policy judged only the first."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """POST ``body``: the answer's status (0: none) and what went wrong ("" on 2xx)."""
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    deadline = time.monotonic() + timeout_s
    try:
        with outbound.opener(deadline, _NoRedirect()).open(request, timeout=timeout_s) as answer:
            answer.read(1 << 16)
            return answer.status, ""
    except urllib.error.HTTPError as ex:
        ex.close()
        return ex.code, f"HTTP {ex.code}"
    except (urllib.error.URLError, OSError, http.client.HTTPException) as ex:
        if time.monotonic() >= deadline:
            return 0, f"no answer within {timeout_s:g} s"
        reason = getattr(ex, "reason", ex)
        return 0, f"{type(reason).__name__}: {reason}"[:500]
    except ValueError as ex:  # the request could not be made (its text may hold a header)
        return 0, f"the request could not be made: {type(ex).__name__}"


def headers_of(delivery: DeliveryRow) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "foldline-push",
        EVENT_ID_HEADER: delivery.delivery_id,
    }
    if delivery.token:
        headers["X-A2A-Notification-Token"] = delivery.token
    if delivery.scheme and delivery.credentials:
        headers["Authorization"] = f"{delivery.scheme} {delivery.credentials}"
    return headers


class LogClosed(Exception):
    """The deliverer's process closed its log (the server stops, or gave the lease up)."""


class Deliverer:
    """``engine`` gives this process's open engine, or None once it closed its log."""

    def __init__(
        self,
        engine: Callable[[], DomainEngine | None],
        holder: str,
        policy: UrlPolicy,
        payload: Payload,
        *,
        stopping: threading.Event,
        busy: BusyBoard | None = None,
        jitter: Callable[[], float] = lambda: random.uniform(-push_.JITTER, push_.JITTER),
        send: Callable[[str, bytes, dict[str, str], float], tuple[int, str]] = post,
    ) -> None:
        self._engine = engine
        self.holder = holder
        self.policy = policy
        self.payload = payload
        self._stopping = stopping
        self._busy = busy
        self._jitter = jitter
        self._send = send
        self._pid = -1
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight: dict[str, Future[None]] = {}
        self._counted = False  # this process counts one piece of work on the busy board

    # -- the thread ----------------------------------------------------------------------------

    def start(self) -> None:
        """Run in this process (once; again in a forked child)."""
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._pool = None  # a forked child's copy names the parent's threads
            self._in_flight = {}
            self._counted = False
        threading.Thread(target=self._run, name="foldline-pusher", daemon=True).start()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    engine = self._engine()
                    if engine is None:  # this process closed its log: it delivers no more
                        return
                    log_ = engine.log
                    seen = log_.head()
                    wait = self.step()
                    if not self._stopping.is_set():
                        log_.wait_for(seen, min(wait, MAX_WAIT_S))
                except Exception as ex:  # a storage fault, a log gone: try again, not give up
                    log.error("push deliveries: %s: %s", type(ex).__name__, ex)
                    self._stopping.wait(MAX_WAIT_S)
        finally:
            self._count(False)
            with self._lock:
                self._pid = -1  # started again by the next tenure of this process

    # -- one pass ------------------------------------------------------------------------------

    def step(self, wait: bool = False) -> float:
        """Claim and send what is due (sent in the pool; ``wait``: until they are recorded).
        Returns the seconds until the next delivery falls due."""
        engine = self._open()
        conn = engine.log.connection()
        now = engine.clock.now()
        stamp = format_time(now)
        self._count(queries.owed_count(conn) > 0)  # before a request can go out
        with self._lock:
            done = [key for key, future in self._in_flight.items() if future.done()]
            for key in done:
                del self._in_flight[key]
            room = push_.CONCURRENCY - len(self._in_flight)
        for delivery in queries.claimable(conn, self.holder, stamp, push_.CONCURRENCY * 4):
            if room <= 0:
                break
            if delivery.delivery_id in self._in_flight:
                continue
            claimed = self._claim(engine, delivery, now)
            if claimed is not None:
                room -= 1
                self._submit(claimed)
        if wait:
            for future in list(self._in_flight.values()):
                future.result()
        self._count(queries.owed_count(conn) > 0)
        due = queries.next_due(conn)
        if due is None or room <= 0:  # nothing owed, or no room until an outcome commits
            return MAX_WAIT_S
        return max(0.05, (parse_time(due) - engine.clock.now()).total_seconds())

    def _claim(self, engine: DomainEngine, delivery: DeliveryRow, now: Any) -> DeliveryRow | None:
        """The delivery as claimed for an attempt, or None (another worker was first, or the
        holder has its fill in flight; a waiting one past its age is given up)."""
        try:
            if delivery.progress == "waiting" and (
                (now - parse_time(delivery.at)).total_seconds() >= push_.MAX_AGE_S
            ):
                engine.handle(push_.ExpirePush(delivery_id=delivery.delivery_id))
                return None
            engine.handle(
                push_.StartPushAttempt(delivery_id=delivery.delivery_id, holder=self.holder)
            )
        except EngineError as ex:
            log.debug("delivery %s not claimed: %s", delivery.delivery_id, ex)
            return None
        return queries.delivery(engine.log.connection(), delivery.delivery_id)

    def _submit(self, delivery: DeliveryRow) -> None:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    push_.CONCURRENCY, thread_name_prefix="foldline-push"
                )
            self._in_flight[delivery.delivery_id] = self._pool.submit(self._attempt, delivery)

    def _attempt(self, delivery: DeliveryRow) -> None:
        engine = self._open()
        # A client span per attempt (ADR 0059), a child of the task's job's span; the
        # receiver gets it as ``traceparent``.
        carrier = job_trace.task_carrier(engine.log, delivery.task_id)
        span = tracing.start(
            "push",
            carrier=carrier,
            kind="client",
            root=bool(carrier),
            attributes={
                job_trace.TASK: delivery.task_id,
                "foldline.delivery": delivery.delivery_id,
                "foldline.attempt": delivery.attempts,
            },
        )
        try:
            with tracing.activated(span):
                self._attempt_in(engine, delivery, span)
        finally:
            span.end()

    def _attempt_in(self, engine: DomainEngine, delivery: DeliveryRow, span: tracing.Span) -> None:
        status, error, refused = 0, "", False
        try:
            self.policy.check_resolved(delivery.url)
            body = self.payload(engine.log.connection(), delivery)
            headers = {**headers_of(delivery), **span.carrier()}
            status, error = self._send(delivery.url, body, headers, push_.TIMEOUT_S)
        except UrlRefused as ex:
            refused, error = True, str(ex)[:500]
        except Exception as ex:  # a payload that cannot be built: retried, and visible
            log.exception("delivery %s: no request was sent", delivery.delivery_id)
            error = f"{type(ex).__name__}: {ex}"[:500]
        if self._stopping.is_set():
            return  # the server stops: the claim stays for the next holder
        span.set("http.response.status_code", status or None)
        span.set(job_trace.OUTCOME, "delivered" if 200 <= status < 300 else error or "failed")
        if not 200 <= status < 300:
            span.fail(error or f"HTTP {status}")
        try:
            recorded = engine.handle(
                push_.RecordPushOutcome(
                    delivery_id=delivery.delivery_id,
                    attempt=delivery.attempts,
                    holder=self.holder,
                    status=status,
                    error=error,
                    refused=refused,
                    jitter=self._jitter(),
                )
            )
            span.set(job_trace.POSITIONS, [recorded.first_position, recorded.last_position])
        except EngineError as ex:  # claimed again meanwhile, or the log is gone
            log.warning("delivery %s: outcome not recorded: %s", delivery.delivery_id, ex)

    def _open(self) -> DomainEngine:
        engine = self._engine()
        if engine is None:
            raise LogClosed("this process closed its log")
        return engine

    def _count(self, owed: bool) -> None:
        if self._busy is None or owed == self._counted:
            return
        (self._busy.enter if owed else self._busy.leave)()
        self._counted = owed
