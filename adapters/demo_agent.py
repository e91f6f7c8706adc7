"""The built-in demo agent: reads the prompt on stdin and echoes it back a word at a time.

It is what ``foldline serve`` runs when ``FOLDLINE_RUNNER`` is unset, so that a fresh server
shows a whole job lifecycle (accepted, live deltas, result) without any agent installed.
``FOLDLINE_DEMO_DELAY_S`` sets the pause between words (default 0.2 s).
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    prompt = sys.stdin.read()
    delay = float(os.environ.get("FOLDLINE_DEMO_DELAY_S", "0.2"))
    words = prompt.split() or ["(empty", "prompt)"]
    sys.stdout.write("echo:")
    for word in words[:200]:
        sys.stdout.write(" " + word)
        sys.stdout.flush()
        time.sleep(delay)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
