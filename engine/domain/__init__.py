"""The built-in machines: lease, session, job, task (design.md §4.2-§4.5), a job's result, a
push notification's delivery (ADR 0039) and the retirement of ended rows (ADR 0062)."""

from engine.domain.job import JOB
from engine.domain.lease import LEASE
from engine.domain.push import PUSH
from engine.domain.refusals import AUDIT
from engine.domain.result import RESULT
from engine.domain.retention import RETENTION
from engine.domain.session import SESSION
from engine.domain.task import TASK

MACHINES = (LEASE, SESSION, JOB, TASK, RESULT, PUSH, RETENTION, AUDIT)

__all__ = ["AUDIT", "JOB", "LEASE", "MACHINES", "PUSH", "RESULT", "RETENTION", "SESSION", "TASK"]
