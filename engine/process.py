"""This process's id, kept current across fork without a system call per use.

Objects that hold connections (the storage's writer and readers, the group commit's queue,
the checkpoint thread) ask on each use whether they were made in this process or inherited by
a forked child, which must open its own. ``os.getpid`` answers with a system call each time
(the C library keeps no cache), once or twice per append; this module asks once per process
and again in every child ``os.fork`` makes (``multiprocessing``, gunicorn's workers).
"""

from __future__ import annotations

import os

_current = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _current.__setitem__(0, os.getpid()))


def pid() -> int:
    """``os.getpid()``, remembered."""
    return _current[0]
