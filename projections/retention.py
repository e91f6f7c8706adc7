"""Apply a retention policy (ADR 0062): retire the read-model rows of jobs that ended long ago,
by appending ``retention.retired`` for each (``engine.domain.retention``), or list them.

The events are appended under the log's newest epoch (the tenure in force: retention is
maintenance, not a new holder), a batch of jobs per transaction, each on its own
``retention:<job id>`` stream at its head. The folds do the rest: ``projections.jobs`` deletes
the row, ``projections.retired`` records when and why, and keeps the job's idempotency key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from engine.clock import Clock, SystemClock, format_time
from engine.domain.retention import EntityRetired
from engine.errors import InvalidArgument
from engine.log import Log, Transaction
from projections.queries.retired import Retirable, newest_epoch, retirable_jobs

BATCH = 200  # jobs retired per transaction
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
    policy: str
    ended_before: str
    jobs: list[Retirable]
    retired: bool  # False: a dry run, nothing appended
    first_position: int = 0
    last_position: int = 0


def retire_jobs(
    log: Log,
    older_than: str,
    *,
    dry_run: bool,
    clock: Clock | None = None,
    limit: int = 100_000,
) -> Retention:
    """Retire (or with ``dry_run`` list) the ended jobs whose rows last changed more than
    ``older_than`` ago.

    Raises:
        InvalidArgument: a malformed age.
        StorageError: the log could not be written.
    """
    age = parse_age(older_than)
    ended_before = format_time((clock or SystemClock()).now() - age)
    policy = f"ended more than {older_than} ago"
    jobs = retirable_jobs(log.connection(), ended_before, limit)
    if dry_run or not jobs:
        return Retention(policy, ended_before, jobs, False)
    log.fence(newest_epoch(log.connection()))
    first = last = 0
    for start in range(0, len(jobs), BATCH):

        def work(
            tx: Transaction, batch: list[Retirable] = jobs[start : start + BATCH]
        ) -> tuple[int, int]:
            positions = []
            for job in batch:
                event = EntityRetired(
                    kind="job", policy=policy, ended_at=job.ended_at, command_id=job.command_id
                )
                positions.append(tx.append(f"retention:{job.job_id}", None, [event]).last_position)
            return positions[0], positions[-1]

        low, last = log.write(work)
        first = first or low
    return Retention(policy, ended_before, jobs, True, first, last)
