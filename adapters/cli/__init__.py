"""The ``foldline`` command line. JSON goes to stdout, messages to stderr.

One module per command group (``serving``, ``audit``), the parser and ``main`` in ``main``,
and the exit codes in ``exits``; ``python -m adapters.cli`` and the ``foldline`` script both
enter at ``main``.
"""

from adapters.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
