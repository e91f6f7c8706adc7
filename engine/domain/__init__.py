"""The built-in machines: lease, session, job and task (SPEC §4.2-§4.5)."""

from engine.domain.job import JOB
from engine.domain.lease import LEASE
from engine.domain.session import SESSION
from engine.domain.task import TASK

MACHINES = (LEASE, SESSION, JOB, TASK)

__all__ = ["JOB", "LEASE", "MACHINES", "SESSION", "TASK"]
