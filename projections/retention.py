"""Apply retention policies (ADR 0062): retire the read-model rows of entities that ended long
ago (jobs, tasks, push deliveries, sessions: ``projections.queries.retired.POLICIES``), by
appending ``retention.retired`` for each (``engine.domain.retention``), or list them.

One mechanism for every machine, driven by its row of the policy table. The events are appended
under the log's newest epoch (the tenure in force: retention is maintenance, not a new holder),
a batch of entities per transaction, each on its own ``retention:<entity id>`` stream at its
head. The folds do the rest: the machine's read model deletes the row, ``projections.retired``
records when and why, and keeps the idempotency key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from engine.clock import Clock, SystemClock, format_time
from engine.domain.retention import EntityRetired
from engine.errors import InvalidArgument
from engine.log import Log, Transaction
from projections.queries.retired import POLICIES, Policy, Retirable, newest_epoch, retirable

BATCH = 200  # entities retired per transaction
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m`` or ``45s`` as a duration.

    Raises:
        InvalidArgument: anything else, or zero.
    """
    found = re.fullmatch(r"(\d{1,6})([dhms])", text.strip())
    if found is None or int(found.group(1)) == 0:
        raise InvalidArgument(f"{text!r}: an age is a positive number and d, h, m or s (30d)")
    return timedelta(seconds=int(found.group(1)) * _UNITS[found.group(2)])


@dataclass(frozen=True)
class Retention:
    """What one machine's policy retired (or, in a dry run, would retire)."""

    kind: str
    policy: str
    ended_before: str
    entities: list[Retirable]
    retired: bool  # False: a dry run, nothing appended
    first_position: int = 0
    last_position: int = 0


def retire(
    log: Log,
    ages: Mapping[str, str],
    *,
    dry_run: bool,
    clock: Clock | None = None,
    limit: int = 100_000,
) -> list[Retention]:
    """Retire (or with ``dry_run`` list) the ended entities of each machine ``ages`` names
    (kind -> age, ``POLICIES``' kinds) whose rows last changed more than that age ago, one
    ``retention.retired`` event each, in ``POLICIES``' order.

    Raises:
        InvalidArgument: a malformed age, or a kind no policy covers.
        StorageError: the log could not be written.
    """
    unknown = sorted(set(ages) - set(POLICIES))
    if unknown:
        raise InvalidArgument(f"no retention policy for {unknown}: one of {sorted(POLICIES)}")
    parsed = {kind: parse_age(age) for kind, age in ages.items()}
    now = (clock or SystemClock()).now()
    done = []
    for kind, policy in POLICIES.items():
        if kind in parsed:
            ended_before = format_time(now - parsed[kind])
            done.append(_retire(log, policy, ages[kind], ended_before, dry_run, limit))
    return done


def _retire(
    log: Log, policy: Policy, age: str, ended_before: str, dry_run: bool, limit: int
) -> Retention:
    words = f"ended more than {age} ago"
    found = retirable(log.connection(), policy, ended_before, limit)
    if dry_run or not found:
        return Retention(policy.kind, words, ended_before, found, False)
    log.fence(newest_epoch(log.connection()))
    first = last = 0
    for start in range(0, len(found), BATCH):

        def work(
            tx: Transaction, batch: list[Retirable] = found[start : start + BATCH]
        ) -> tuple[int, int]:
            positions = []
            for entity in batch:
                event = EntityRetired(
                    kind=policy.kind,
                    policy=words,
                    ended_at=entity.ended_at,
                    command_id=entity.command_id,
                )
                stream = f"retention:{entity.entity_id}"
                positions.append(tx.append(stream, None, [event]).last_position)
            return positions[0], positions[-1]

        low, last = log.write(work)
        first = first or low
    return Retention(policy.kind, words, ended_before, found, True, first, last)
