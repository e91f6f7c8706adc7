"""Every command has exactly one rule, registered next to its code; no rules module is long."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.domain import channel, controls, pausing, push, refusals
from engine.domain import commands as c
from engine.domain.rules import RULES, rule
from engine.errors import InvalidDeclaration

ROOT = Path(__file__).resolve().parents[2]


def _command_classes() -> set[type[c.Command]]:
    found, frontier = set(), list(c.Command.__subclasses__())
    while frontier:
        cls = frontier.pop()
        found.add(cls)
        frontier += cls.__subclasses__()
    modules = (
        c.__name__,
        channel.__name__,
        controls.__name__,
        pausing.__name__,
        push.__name__,
        refusals.__name__,
    )
    return {cls for cls in found if cls.__module__ in modules}


def test_rule_registry_has_one_rule_per_command() -> None:
    commands = _command_classes()
    assert len(commands) > 30
    assert set(RULES) == commands


def test_rule_registry_refuses_a_second_rule_for_a_command() -> None:
    with pytest.raises(InvalidDeclaration, match="AcquireLease has two rules"):
        rule(c.AcquireLease)(lambda cmd, ctx: None)
    assert RULES[c.AcquireLease].__name__ == "acquire_lease"


@pytest.mark.parametrize(
    "path", sorted((ROOT / "engine" / "domain" / "rules").glob("*.py")), ids=lambda p: p.name
)
def test_rule_registry_modules_stay_small(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 300
