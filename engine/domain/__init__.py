"""The built-in machines: lease, session, job, task (design.md §4.2-§4.5) and a job's result."""

from engine.domain.job import JOB
from engine.domain.lease import LEASE
from engine.domain.result import RESULT
from engine.domain.session import SESSION
from engine.domain.task import TASK

MACHINES = (LEASE, SESSION, JOB, TASK, RESULT)

__all__ = ["JOB", "LEASE", "MACHINES", "RESULT", "SESSION", "TASK"]
