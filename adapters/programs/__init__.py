"""The programs beside the command line: the server, the console server, an example agent.

``server`` is the Falcon app under gunicorn (``foldline serve``), ``console_server`` the
read-only console (``foldline console``), ``channel_agent`` the example agent that speaks the
live channel (``python -m adapters.programs.channel_agent``). Each builds its process from the
wings below it (ADR 0045); the command line (``adapters.cli``) starts them. The front, a
program with a package of its own, stands beside them in ``adapters.front``.
"""
