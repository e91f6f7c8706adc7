"""What the operator decides, read and checked at boot: the server's settings and flags, the
named agents, the deployer's agent card, the run environment, the shared-volume mode, the
public URL, the operator token, where a log is read from, and the machines the audit knows.

Below the runtime's services and the entry points, above the OS primitives (ADR 0045): a
setting is resolved once, into a value the services are given, and never reaches back up.
"""
