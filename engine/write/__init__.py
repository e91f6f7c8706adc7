"""The write path under ``engine.log``: concurrent callers share one transaction and one sync.

- ``engine.write.group_commit``: the queue of callers and the leader hand-over;
- ``engine.write.batch``: one batch run, one transaction for its callers, tried once or twice;
- ``engine.write.transaction``: one batch's writes (checks, chain, buffered rows, kept state);
- ``engine.write.context``: what a batch is given by its log, so that none of them imports it.

It stands on the storage seam (``engine.storage.seam``) and the core's parts (chain, clock,
events, machines, projections); ``engine.log`` builds it and is its only user.
"""
