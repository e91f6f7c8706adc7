"""``foldline front``: one session id's own workspace, served through a worker (ADR 0036).

The front (root, holds no log and opens none) checks the session header, builds
``<base>/<sid>`` from ``<base>/.template``, starts the worker (``foldline serve`` as the run
user) in a mount namespace where only that directory is visible, and proxies the contract paths
to it. docs/agentcore.md "Session dirs" describes the deployment.
"""
