"""In-process wake-up hints (blinker). Post-commit only; correctness never depends on them.

``committed`` is sent with ``sender=<Log>`` and ``position=<head>`` after a COMMIT made in this
process, and by ``engine.notifier`` when it sees a commit made by another process. Receivers
run in the sender's thread: they should only set an Event or notify a Condition. blinker holds
receivers weakly by default; connect module-level functions or pass ``weak=False``.
"""

from blinker import Namespace

_namespace = Namespace()

committed = _namespace.signal("foldline.committed")
