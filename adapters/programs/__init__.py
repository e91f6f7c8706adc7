"""The programs foldline runs beside the command line: the server under gunicorn
(``foldline serve``), the read-only console server (``foldline console``), and the example
agent that speaks the live channel (``python -m adapters.programs.channel_agent``).

Each builds its process from the wings below it (ADR 0045): HTTP, the runtime's services, the
settings and the OS primitives; the command line (``adapters.cli``) starts them. The front,
a program with a package of its own, stands beside them in ``adapters.front``.
"""
