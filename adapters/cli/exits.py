"""Every exit code ``foldline`` ends with, and the one table from error class to exit code.

Scripts match on these numbers, so they are part of the command line's contract: 0 for done,
1 for a check that ran and found something (a violation, a difference, a copy whose chain does
not verify), 2 for a command that could not run (its arguments, the configuration, or an
engine error such as a file that is not a log).
"""

from __future__ import annotations

from engine.errors import EngineError

OK = 0
FOUND = 1
REFUSED = 2

EXIT_CODES: dict[type[Exception], int] = {
    EngineError: REFUSED,
}


def exit_code(error: Exception) -> int:
    """The code of the most specific class in the table (``REFUSED`` for anything else)."""
    for cls in type(error).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return REFUSED
