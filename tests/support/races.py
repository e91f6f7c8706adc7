"""The three races of the domain concurrency tests, shared by threads and child processes."""

from __future__ import annotations

from engine.domain import commands as c
from engine.domain.rules import Settings
from engine.engine import Engine

SETTINGS = Settings(resource_groups={"gpu": 1})


def prepare(engine: Engine) -> None:
    """One session owing nothing, one running job, a group with one free unit."""
    engine.handle(c.CreateSession(session_id="race", start_run_id="r"))
    engine.handle(c.CreateSession(session_id="owner", start_run_id="r"))
    engine.handle(c.AcceptJob(job_id="prize", session_id="owner"))
    engine.handle(c.StartJob(job_id="prize", run_id="run-prize"))


def attempt(race: str, name: str) -> c.Command:
    if race == "capacity":
        return c.AcceptJob(
            job_id=f"cap-{name}", session_id="owner", resource_group="gpu", owed=False
        )
    if race == "pointer":
        return c.CreateTask(task_id=f"task-{name}", session_id="race")
    if race == "finish":
        return c.FinishJob(job_id="prize", outcome="ok", result=name)
    raise ValueError(race)
