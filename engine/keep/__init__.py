"""Keeping a log for years: a continuous, verified replica, a restore from it, and archival of
old events into sealed segments that keep the Merkle proofs (ADRs 0062 and 0063).

- ``engine.keep.replica``: ``foldline backup``: ship new events by position to a replica, each
  batch proved consistent with the replica's last checkpoint;
- ``engine.keep.restore``: ``foldline restore``: a working log from a replica, to a position or
  a time;
- ``engine.keep.segment``: a sealed, compressed segment of archived events and its tree;
- ``engine.keep.archive``: ``foldline archive``: move the events before a checkpoint into a
  segment, keep what the live log needs, give the space back; join a live log with its segments.

SQLite logs only: a PostgreSQL log is refused with a clear error (its own PITR is the answer
there, docs/operating.md).
"""
