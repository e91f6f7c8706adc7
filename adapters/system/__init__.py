"""The OS and file primitives the other wings stand on: the lowest wing (ADR 0045).

Child processes and their pipes, the lease file and the PostgreSQL log's lease gate, the log's
anchor, mounts, prompt files, outbound HTTP and its URL policy, and git (``gitwork``). The wing
imports no other, so each of its modules can be read, tested and reused knowing only the
standard library and the engine.
"""
