"""The built-in machines: lease, session, job, task (design.md §4.2-§4.5), a job's result and a
push notification's delivery (ADR 0039)."""

from engine.domain.job import JOB
from engine.domain.lease import LEASE
from engine.domain.push import PUSH
from engine.domain.result import RESULT
from engine.domain.session import SESSION
from engine.domain.task import TASK

MACHINES = (LEASE, SESSION, JOB, TASK, RESULT, PUSH)

__all__ = ["JOB", "LEASE", "MACHINES", "PUSH", "RESULT", "SESSION", "TASK"]
