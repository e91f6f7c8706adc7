"""Every exit code ``foldline`` ends with, and the one table from error class to exit code and
the line it prints on stderr.

Scripts match on these numbers, so they are part of the command line's contract: 0 for done,
1 for a check that ran and found something (a violation, a difference, a copy whose chain does
not verify), 2 for a command that could not run (its arguments, the configuration, or an
engine error such as a file that is not a log).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from adapters.settings.config_error import ConfigError
from engine.errors import EngineError

OK = 0
FOUND = 1
REFUSED = 2

# Where a command caught an error: anywhere (``None``), or a step whose line says it otherwise.
BIND = "bind"  # ``foldline console``'s --bind: its message names the setting itself

Line = Callable[[Any], str]

# (class, step) -> the exit code and the line after ``foldline: `` on stderr; a step's row
# comes before the row for anywhere of the same class.
EXIT_CODES: dict[tuple[type[Exception], str | None], tuple[int, Line]] = {
    (EngineError, None): (REFUSED, lambda ex: f"{ex.code}: {ex}"),
    (ConfigError, None): (REFUSED, lambda ex: f"invalid configuration: {ex}"),
    (ConfigError, BIND): (REFUSED, str),
}


def _row(error: Exception, step: str | None) -> tuple[int, Line]:
    for cls in type(error).__mro__:
        for key in ((cls, step), (cls, None)):
            if key in EXIT_CODES:
                return EXIT_CODES[key]
    return REFUSED, str


def exit_code(error: Exception, step: str | None = None) -> int:
    """The code of the most specific class in the table (``REFUSED`` for anything else)."""
    return _row(error, step)[0]


def refuse(error: Exception, step: str | None = None) -> int:
    """Print the table's line for ``error`` on stderr; its exit code."""
    code, line = _row(error, step)
    print(f"foldline: {line(error)}", file=sys.stderr)
    return code
