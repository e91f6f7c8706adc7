"""The OS and file primitives the other wings stand on: child processes and their pipes, the
lease file, the log's anchor, mounts, prompt files, outbound HTTP and its URL policy, and git.

The lowest wing of ``adapters`` (ADR 0045): it imports no other wing, so each of its modules can
be read, tested and reused knowing only the standard library and the engine.
"""
