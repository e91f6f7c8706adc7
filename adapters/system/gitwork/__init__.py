"""The git layer of job worktrees: isolate a writer, capture its change, integrate it (issue 28).

Each ``workspace-write`` job works in its own ``git worktree`` on branch ``foldline/<job>``;
when it ends its change is captured as a binary patch (``patches``), and an accepted patch is
planned against the workspace's working tree on a scratch index and written there (``apply``)
without touching the real index or HEAD. Every command goes through one ``Git`` runner
(``runner``) that can run it as the run user and turns hooks and fsmonitor off, because the
workspace is agent-controlled: the server itself never reads, writes or deletes a file in it.
"""
