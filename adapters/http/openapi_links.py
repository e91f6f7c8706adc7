"""The OpenAPI links of ``/openapi.json``: from an answer that names a job, a session or an
A2A task to every operation on it (ADR 0056).

A link names its target by ``operationId`` and fills the target's parameters with runtime
expressions into the answer (``$response.body#/jobs/0/job_id``), so a client, or a stateful
fuzzer (schemathesis), can chain a create to the reads, controls, judgements and cancels of
what it made. The route table (``adapters.http.routes``) puts them on its producers' answers;
schemathesis refuses a document whose link names an unknown operation or parameter
(``tests/http/test_routes.py``).
"""

from __future__ import annotations

from adapters.http import channel
from adapters.http.openapi_parts import Link


def to_session(session: str) -> dict[str, Link]:
    """Links from an answer naming a session (``session``, a runtime expression) to every
    operation on one session, and to its jobs."""
    one = {"session_id": session}
    links = {target: Link(target, one) for target in SESSION_OPERATIONS}
    return {**links, "list_session_jobs": Link("list_jobs", {"session": session})}


def to_job(job: str, session: str) -> dict[str, Link]:
    """Links from an answer naming a job and its session (runtime expressions) to every
    operation on one job (reads, controls, judgements), its stream, its children and its
    session: what a fuzzer chains after it made or listed one (ADR 0056)."""
    links = {target: Link(target, {"job_id": job}) for target in JOB_OPERATIONS}
    return {
        **links,
        "wait_for_jobs": Link("wait_for_jobs", {"ids": job}),
        "stream_events": Link("stream_events", {"stream_id": f"job:{{{job}}}"}),
        "list_children": Link("list_jobs", {"parent": job}),
        **to_session(session),
    }


def to_task(task: str, session: str) -> dict[str, Link]:
    """Links from an A2A answer naming a task: its ``/v1`` reads, and the JSON-RPC methods on
    it (``POST /`` again, with a body that names it)."""
    rpc = {
        f"rpc_{method}": Link(
            "a2a",
            body={"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": task}},
        )
        for method in ("GetTask", "CancelTask", "SubscribeToTask")
    }
    return {"get_task": Link("get_task", {"task_id": task}), **rpc, **to_session(session)}


SESSION_OPERATIONS = ("get_session", "control_session", "taint_session")
JOB_OPERATIONS = (
    "get_job",
    "read_result",
    "job_controls",
    "get_patch",
    "control_job",
    *(f"result_{name}" for name in ("accept", "reject", "integrate", "integrated")),
    *(f"{action}_job" for action in channel.BODIES),
)
FIRST_JOB = to_job("$response.body#/jobs/0/job_id", "$response.body#/jobs/0/session_id")
