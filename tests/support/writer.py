"""A child process that appends to a log and reports each commit on stdout.

    python -m tests.support.writer DB PREFIX COUNT [--sync full|normal]

Each append is a batch of 1..3 events on one stream. A line ``first last`` is printed (and
flushed) only after ``append`` has returned, i.e. after the COMMIT: every printed position was
acknowledged. COUNT 0 means "until killed". Exits 3 on any engine error.
"""

from __future__ import annotations

import argparse
import random
import sys

from engine import EngineError, open_log
from tests.support.tickets import MACHINES, TicketNoted, TicketOpened, TicketTitles


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("prefix")
    parser.add_argument("count", type=int)
    parser.add_argument("--sync", default="full")
    args = parser.parse_args()
    log = open_log(args.db, MACHINES, [TicketTitles()], sync=args.sync)
    rng = random.Random()
    versions: dict[str, int] = {}
    done = 0
    print("ready", flush=True)
    while args.count == 0 or done < args.count:
        stream_id = f"ticket:{args.prefix}-{rng.randrange(50)}"
        version = versions.get(stream_id, 0)
        size = rng.randint(1, 3)
        batch = f"{args.prefix}.{done}/{size}"  # lets an auditor check the batch is whole
        events = [TicketNoted(text=batch) for _ in range(size)]
        if version == 0:
            events[0] = TicketOpened(title=batch)
        try:
            result = log.append(stream_id, version, events)
        except EngineError as ex:
            print(f"error {ex.code} {ex}", file=sys.stderr, flush=True)
            return 3
        versions[stream_id] = result.last_version
        print(result.first_position, result.last_position, flush=True)
        done += 1
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
