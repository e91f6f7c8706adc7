"""The runtime's services: one server's ``Runtime`` and the parts it drives (ADR 0045).

Dispatch and the runner start and watch runs; tenure holds the lease, recovery cleans up after
a crash; push, checkpoints, notify and the busy board do their duties; writers' worktrees and
integration carry a change into the workspace; the sandbox keeps a run out of the log's reach.
Above the settings and the OS primitives, below HTTP and the programs: a service is given its
settings and never imports a resource or a program. The worker's side of the front
(``front_handoff``) lives here, because dispatch uses it to hand an owed reply on.
"""
