"""A child process racing other writers for one prize, printing one outcome per attempt.

    python -m tests.support.racer DB RACE NAME ATTEMPTS GO_FILE

RACE is ``capacity`` (the last unit of a group), ``pointer`` (an A2A task on a session that owes
nothing) or ``finish`` (finishing the same running job). The child waits for GO_FILE to appear,
so that racers in several processes start together, then prints ``ok`` or the error code.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from engine import EngineError
from projections import open_engine
from tests.support.races import SETTINGS, attempt


def main() -> int:
    db, race, name, attempts, go = (
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        int(sys.argv[4]),
        Path(sys.argv[5]),
    )
    engine = open_engine(db, SETTINGS)
    print("ready", flush=True)
    deadline = time.monotonic() + 30
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    outcomes: list[str] = []

    def one(i: int) -> None:
        try:
            engine.handle(attempt(race, f"{name}-{i}"))
            outcomes.append("ok")
        except EngineError as ex:
            outcomes.append(ex.code)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    print("\n".join(outcomes), flush=True)
    engine.log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
