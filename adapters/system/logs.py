"""The server's log lines (ADR 0059): JSON, one object a line on stderr, at the level
``FOLDLINE_LOG_LEVEL`` sets for every logger, gunicorn's included.

Each line holds ``time`` (UTC, ISO 8601, milliseconds), ``level``, ``logger`` and
``message``; inside a span also ``trace_id`` and ``span_id`` (``adapters.system.tracing``),
and after an exception its ``exception`` text. The default level is ``info``: the boot, each
lease change and each recovery are said at info, so an operator sees them without asking.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping

from adapters.system import tracing

SETTING = "FOLDLINE_LOG_LEVEL"
DEFAULT = "info"
LEVELS = ("debug", "info", "warning", "error", "critical")


def level_name(environ: Mapping[str, str] = os.environ) -> str:
    """The level ``FOLDLINE_LOG_LEVEL`` names, lowercased (default ``info``).

    Raises:
        ValueError: it names no level (the message says which are known).
    """
    name = (environ.get(SETTING) or DEFAULT).strip().lower()
    if name not in LEVELS:
        raise ValueError(f"{SETTING}={name!r} is not one of {', '.join(LEVELS)}")
    return name


class JsonLines(logging.Formatter):
    """A record as one JSON object on one line."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line: dict[str, str] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        ids = tracing.log_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(name: str) -> None:
    """Every logger of this process at level ``name``, in JSON lines on stderr (the root's
    one handler; gunicorn's own logger is given the formatter by its logger class)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(name.upper())
