"""A fork of a job (ADR 0057), planned: a new job of the source's agent, session and write scope
below the caller, started from the source's prompt (and what a caller adds) with the source's
output so far, a writer's from its worktree's current change; admitted like a spawn, recorded
with its origin. The dispatcher starts its run (``Dispatcher.fork``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.services import job_controls
from adapters.services.job_controls import Controller
from adapters.system.prompts import join_prompts
from engine.domain.engine import DomainEngine
from engine.domain.errors import NotFound
from projections import queries


@dataclass(frozen=True)
class ForkPlan:
    """What the fork's launch is: where, its stdin, its agent, its scope and worktree, and the
    request that admits and records it."""

    session_id: str
    stdin: bytes
    agent: str
    write_scope: tuple[str, ...]
    worktree: tuple[Path, str] | None  # a writer's: the source's worktree and base commit
    admit: Callable[[list[str]], Any]


def plan(
    engine: DomainEngine,
    prompts_of: Callable[[tuple[str, ...]], list[bytes]],
    source_id: str,
    extra_input: str,
    by: Controller,
) -> ForkPlan:
    """The fork of ``source_id`` asked for by ``by``.

    Raises:
        NotFound: no job ``source_id``.
        OSError: the source's prompt file cannot be read.
    """
    source = queries.job(engine.log.connection(), source_id)
    if source is None:
        raise NotFound(f"job {source_id!r} does not exist", job_id=source_id)
    accepted: Any = engine.log.read_stream(f"job:{source_id}")[0].event
    stdin = join_prompts(prompts_of((*accepted.covers, source_id)))
    if extra_input:
        stdin = stdin.rstrip(b"\n") + b"\n\n" + extra_input.encode()
    policy = engine.settings.agent(source.agent)
    request = job_controls.fork_request(source, stdin.decode("utf-8", "replace"), policy, by)
    worktree = None
    if source.write_scope and source.worktree:
        worktree = (Path(source.worktree), source.base_commit or "")
    return ForkPlan(source.session_id, stdin, source.agent, source.write_scope, worktree, request)
