"""The command API: ``Engine.handle(command)`` = load -> decide -> append (+ projections).

One command runs as one unit of work in the log's shared write transaction: the rules read
rows through the ``DomainView`` the engine was built with, append through the transaction, and
either everything they appended commits or nothing does. A repeated ``command_id`` appends
nothing and answers the first outcome with ``duplicate=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from engine.clock import Clock
from engine.domain import rules
from engine.domain.commands import Command
from engine.domain.rows import DomainView
from engine.errors import InvalidArgument
from engine.events import Event
from engine.log import Log, Transaction

ViewFactory = Callable[[Any], DomainView]
"""Builds a ``DomainView`` over a cursor inside the write transaction."""


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


class Engine:
    """Handles commands against one log. Thread-safe, like the log."""

    def __init__(self, log: Log, view: ViewFactory, settings: rules.Settings | None = None) -> None:
        self.log = log
        self._view = view
        self.settings = settings or rules.Settings()

    @property
    def clock(self) -> Clock:
        return self.log.clock

    def handle(self, command: Command) -> CommandResult:
        """Decide and append ``command`` atomically; returns after the commit.

        Raises:
            EngineError: the rules refused the command (nothing was appended): ``NotFound``,
                ``AlreadyExists``, ``Conflict``, ``AdmissionRejected``, ``InvalidTransition``,
                ``ConcurrencyError``, ``LeaseBusy``, ``NotLeaseHolder``, ``InvalidArgument``.
        """
        if not isinstance(command, Command):
            raise InvalidArgument(f"expected a Command, got {type(command).__name__}")
        return self.log.write(lambda tx: self.handle_in(tx, command))

    def handle_in(self, tx: Transaction, command: Command) -> CommandResult:
        """Run ``command`` inside a transaction the caller already holds (``Log.write``)."""
        command_id = command.command_id
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
        touched: list[str] = []

        def emit(stream_id: str, events: Sequence[Event], epoch: int | None) -> None:
            tx.append(stream_id, None, list(events), command_id, epoch)
            if stream_id not in touched:
                touched.append(stream_id)

        ctx = rules.Context(
            view=self._view(tx.cursor),
            emit=emit,
            now=self.log.clock.now(),
            log_epoch=tx.epoch,
            settings=self.settings,
        )
        rules.decide(command, ctx)
        return CommandResult(
            command_id=command_id,
            first_position=start + 1 if touched else 0,
            last_position=tx.position if touched else 0,
            streams=tuple(touched),
        )
