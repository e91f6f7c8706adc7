"""The command API: ``Engine.handle(command)`` = load -> decide -> append (+ projections).

The engine knows no machine of its own. It is built with the caller's ``decide(command, ctx)``
and, optionally, a ``view`` factory: a function of the write transaction's cursor returning
whatever ``decide`` reads (typically named queries over the caller's projections). One command
runs as one unit of work in the log's shared write transaction: ``decide`` reads through
``ctx.view``, appends through ``ctx.append``, and either everything it appended commits or
nothing does. It refuses a command by raising an ``EngineError``. A repeated ``command_id``
(any command with that attribute) appends nothing and answers the first outcome with
``duplicate=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Generic, TypeVar

import msgspec

from engine.clock import Clock
from engine.errors import InvalidArgument
from engine.events import Event
from engine.log import Log, Transaction
from engine.machines import StreamHead

CommandT = TypeVar("CommandT")
ViewT = TypeVar("ViewT")
SettingsT = TypeVar("SettingsT")


class CommandResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a command appended: the span of positions and the streams it touched."""

    command_id: str | None
    first_position: int
    last_position: int
    streams: tuple[str, ...]
    duplicate: bool = False

    @property
    def appended(self) -> bool:
        return self.last_position >= self.first_position > 0


class Context(Generic[ViewT, SettingsT]):
    """What ``decide`` gets for one command: its reads, its appends, the time and settings.

    Every read and append is bound to the one write transaction, so a read after an append of
    the same command sees it.
    """

    __slots__ = ("_command_id", "_touched", "_tx", "log_epoch", "now", "settings", "view")

    def __init__(
        self,
        tx: Transaction,
        view: ViewT,
        settings: SettingsT,
        now: datetime,
        command_id: str | None,
    ) -> None:
        self._tx = tx
        self._command_id = command_id
        self._touched: list[str] = []
        self.view = view
        self.settings = settings
        self.now = now
        # The newest epoch in the log, as this transaction sees it (the fence compares with it).
        self.log_epoch = tx.epoch

    @property
    def touched(self) -> tuple[str, ...]:
        """The streams appended to so far, in first-append order."""
        return tuple(self._touched)

    def append(self, stream_id: str, *events: Event, epoch: int | None = None) -> None:
        """Append to ``stream_id`` at its head; the stream's machine may still refuse."""
        self._tx.append(stream_id, None, events, self._command_id, epoch)
        if stream_id not in self._touched:
            self._touched.append(stream_id)

    def head(self, stream_id: str) -> StreamHead:
        """The stream's version and state, including this command's own appends."""
        return self._tx.head_of(stream_id)


Decide = Callable[[CommandT, Context[ViewT, SettingsT]], None]
"""The rules: turn a command into appends through the context, or raise to refuse it."""

ViewFactory = Callable[[Any], ViewT]
"""Builds the view ``decide`` reads over a cursor inside the write transaction."""


def _no_view(cursor: Any) -> None:
    return None


class Engine(Generic[CommandT, ViewT, SettingsT]):
    """Handles commands against one log with the caller's rules. Thread-safe, like the log."""

    def __init__(
        self,
        log: Log,
        decide: Decide[CommandT, ViewT, SettingsT],
        view: ViewFactory[ViewT] | None = None,
        settings: SettingsT = None,  # type: ignore[assignment]
        *,
        accepts: type[Any] | tuple[type[Any], ...] = object,
    ) -> None:
        """``accepts`` is the class (or classes) of the commands ``handle`` takes; anything
        else is an ``InvalidArgument`` before the log is touched."""
        self.log = log
        self.decide = decide
        self._view: ViewFactory[Any] = view or _no_view
        self.settings = settings
        self.accepts = accepts if isinstance(accepts, tuple) else (accepts,)

    @property
    def clock(self) -> Clock:
        return self.log.clock

    def view_of(self, cursor: Any) -> ViewT:
        """What ``decide`` reads, over ``cursor``: a write transaction's, or a read
        connection's for a caller that plans before it writes (and checks again inside)."""
        view: ViewT = self._view(cursor)
        return view

    def handle_all(self, commands: Sequence[CommandT]) -> list[CommandResult]:
        """``handle`` for several commands in one transaction: all of them or none."""
        for command in commands:
            self._check(command)
        return self.log.write(lambda tx: [self.handle_in(tx, command) for command in commands])

    def handle(self, command: CommandT) -> CommandResult:
        """Decide and append ``command`` atomically; returns after the commit.

        Raises:
            EngineError: ``decide`` refused the command, or the log refused an append
                (``InvalidTransition``, ``ConcurrencyError``, ``FencedOut``, ...); nothing
                was appended.
        """
        self._check(command)
        return self.log.write(lambda tx: self.handle_in(tx, command))

    def _check(self, command: CommandT) -> None:
        if not isinstance(command, self.accepts):
            expected = " or ".join(cls.__name__ for cls in self.accepts)
            raise InvalidArgument(f"expected a {expected}, got {type(command).__name__}")

    def handle_in(self, tx: Transaction, command: CommandT) -> CommandResult:
        """Run ``command`` inside a transaction the caller already holds (``Log.write``)."""
        command_id: str | None = getattr(command, "command_id", None)
        if command_id is not None:
            known = tx.known_command(command_id)
            if known is not None:
                return CommandResult(
                    command_id=command_id,
                    first_position=known.first_position,
                    last_position=known.last_position,
                    streams=(known.stream_id,),
                    duplicate=True,
                )
        start = tx.position
        ctx: Context[ViewT, SettingsT] = Context(
            tx, self._view(tx.cursor), self.settings, self.log.clock.now(), command_id
        )
        self.decide(command, ctx)
        touched = ctx.touched
        return CommandResult(
            command_id=command_id,
            first_position=start + 1 if touched else 0,
            last_position=tx.position if touched else 0,
            streams=touched,
        )
