"""What the operator decides, read and checked at boot: the settings wing (ADR 0045).

The server's settings and flags (``config``), the named agents, the deployer's agent card, the
run environment, the shared-volume mode, the public URL, the operator token, where a log is read
from, the machines the audit knows, and the demo agent the runner setting defaults to. Above
the OS primitives, below the runtime's services: a setting is resolved once, into a value the
services are given, and never reaches back up.
"""
