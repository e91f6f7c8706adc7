"""The declarations in force at each position of a log (ADR 0060), as machines an audit
judges the events after them by.

A ``log.declarations`` event at position p declares the rules of every event after p, up to
the next one. Before the first, the code's own machines judge. A recorded event whose digest
is not the digest of the declarations it carries is a finding; the chain already says whether
the event is the one that was written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from engine.audit.source import Reader
from engine.chain import Violation
from engine.declarations import STREAM, LogDeclarations, digest_of, recorded_machines
from engine.errors import InvalidDeclaration
from engine.machines import Machines

Era = tuple[int, Machines]
"""(the position of a ``log.declarations`` event, the machines it declares)."""


def eras(reader: Reader, code: Machines) -> tuple[list[Era], list[Violation]]:
    """The machines each recorded declarations event puts in force, in position order, and
    what is wrong with any of them. One that cannot be read or built is a finding, and the
    machines before it stay in force (the findings it causes are then the events it would have
    allowed).
    """
    found: list[Era] = []
    violations: list[Violation] = []
    built: dict[str, Machines] = {}
    rows: Sequence[Any] = reader.query(
        "SELECT position, payload FROM events WHERE stream_id = ? ORDER BY position", (STREAM,)
    )
    for position, payload in rows:
        try:
            recorded = msgspec.json.decode(bytes(payload), type=LogDeclarations)
        except msgspec.DecodeError as ex:
            violations.append(Violation(position, "declarations_unreadable", str(ex)))
            continue
        if digest_of(recorded.declarations) != recorded.digest:
            violations.append(
                Violation(
                    position,
                    "declarations_digest",
                    f"the declarations recorded here do not have the digest {recorded.digest}",
                )
            )
            continue
        machines = built.get(recorded.digest)
        if machines is None:
            try:
                machines = built[recorded.digest] = recorded_machines(
                    recorded.declarations, code, position
                )
            except InvalidDeclaration as ex:
                violations.append(Violation(position, "declarations_unbuildable", str(ex)))
                continue
        found.append((position, machines))
    return found, violations
