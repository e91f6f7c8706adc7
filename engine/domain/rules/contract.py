"""Output contracts at a job's finish (ADR 0065): the adapter judged the reply against its
agent's schema and says so in ``FinishJob``; the rules decide what the verdict does."""

from __future__ import annotations

from engine.domain import commands as c
from engine.domain.agents import Contract
from engine.domain.rows import JobRow
from engine.domain.rules.registry import Context


def outcome(ctx: Context, row: JobRow, cmd: c.FinishJob) -> str:
    """How the run ends: as it said, unless its agent's contract is strict and the reply broke
    it, then ``error``. A warn contract only records the verdict."""
    policy = ctx.settings.agent(row.agent)
    if cmd.contract_valid is False and policy.contract == Contract.STRICT:
        return "error"
    return cmd.outcome


def broken(cmd: c.FinishJob) -> str:
    """The result of a job a strict contract failed: the reply, then why, as a timeout's note
    says why a run was killed."""
    errors = "; ".join(cmd.contract_errors)
    return f"{cmd.result}\n[foldline: the reply breaks its output contract: {errors}]".lstrip()
