"""Runner scripts for the coordination tests: agents that call ``/v1`` back with their run
token, in plain Python (stdlib only), as a user's agent would."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

CALL = """
import json, os, sys, time, urllib.error, urllib.request

def call(method, path, body=None, token=None):
    request = urllib.request.Request(
        os.environ["FOLDLINE_URL"] + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + (token or os.environ["FOLDLINE_RUN_TOKEN"]),
                 "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=90) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)

def wait_all(ids):
    for _ in range(20):
        status, body = call("GET", "/v1/jobs/wait?ids=" + ",".join(ids) + "&timeout=30")
        if all(job["finished_at"] for job in body["jobs"]):
            return body["jobs"]
    raise SystemExit("children did not finish")
"""

# Spawns a batch that overlaps (refused whole), then two writers and a reader; waits; reads
# each result; accepts the first, rejects the second, integrates the first; tries the things
# that must be refused. Prints one JSON line per step.
ROOT = (
    CALL
    + """
def say(step, status, body):
    print(json.dumps({"step": step, "status": status, "body": body}), flush=True)

status, body = call("POST", "/v1/jobs", {"jobs": [
    {"agent": "writer", "prompt": "a", "write_scope": ["src/a"]},
    {"agent": "writer", "prompt": "a too", "write_scope": ["src/a/deep"]},
    {"agent": "reader", "prompt": "look"}]})
say("overlap", status, body)
status, body = call("POST", "/v1/jobs", {"jobs": [
    {"agent": "writer", "prompt": "a", "write_scope": ["src/a"]},
    {"agent": "writer", "prompt": "b", "write_scope": ["src/b"]},
    {"agent": "reader", "prompt": "look"}]})
say("batch", status, body)
ids = [job["job_id"] for job in body["jobs"]]
jobs = wait_all(ids)
say("waited", 200, jobs)
for job_id in ids:
    say("read", *call("GET", "/v1/jobs/" + job_id + "/result"))
say("accept", *call("POST", "/v1/jobs/" + ids[0] + "/result/accept", {"reason": "good"}))
say("accept again", *call("POST", "/v1/jobs/" + ids[0] + "/result/accept", {"reason": "x"}))
say("reject", *call("POST", "/v1/jobs/" + ids[1] + "/result/reject", {"reason": "wrong"}))
say("integrate rejected", *call(
    "POST", "/v1/jobs/" + ids[1] + "/result/integrated", {"sha256": "0" * 64}))
say("integrate wrong sha", *call(
    "POST", "/v1/jobs/" + ids[0] + "/result/integrate", {"sha256": "a" * 64}))
say("integrate", *call("POST", "/v1/jobs/" + ids[0] + "/result/integrated"))
say("spawn unknown", *call("POST", "/v1/jobs", {"agent": "nobody", "prompt": "x"}))
say("spawn forbidden", *call("POST", "/v1/jobs", {"agent": "root", "prompt": "x"}))
say("children", *call("GET", "/v1/jobs?parent=" + os.environ["FOLDLINE_JOB_ID"]))
"""
)

WORKER = """
import sys
task = sys.stdin.read().strip()
print("WARNING: checked only " + task)
print("worked on " + task)
"""

# Spawns 16 single jobs at once from 16 threads: max_children decides how many get in.
FANOUT = (
    CALL
    + """
import threading
answers = []
def one(n):
    answers.append(call("POST", "/v1/jobs", {"agent": "sleeper", "prompt": str(n)}))
threads = [threading.Thread(target=one, args=(n,)) for n in range(16)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"statuses": sorted(s for s, _ in answers),
                  "reasons": sorted({b.get("error", {}).get("reason", "") for s, b in answers})}))
print("TOKEN " + os.environ["FOLDLINE_RUN_TOKEN"])
"""
)

# Reads another session's job id from its prompt and tries to judge it and spawn there.
PROBER = (
    CALL
    + """
other_job, other_session = sys.stdin.read().split()
print(json.dumps({
    "read": call("GET", "/v1/jobs/" + other_job + "/result")[0],
    "accept": call("POST", "/v1/jobs/" + other_job + "/result/accept", {"reason": "x"})[0],
    "spawn": call("POST", "/v1/jobs", {"session": other_session, "agent": "sleeper",
                                        "prompt": "x"})[0],
}))
"""
)

# Spawns two sleepers, says so, and stays running: a live subtree to cancel.
KEEPER = (
    CALL
    + """
status, body = call("POST", "/v1/jobs", {"jobs": [
    {"agent": "sleeper", "prompt": "1"}, {"agent": "sleeper", "prompt": "2"}]})
print("spawned " + " ".join(job["job_id"] for job in body["jobs"]), flush=True)
sys.stdin.read()
time.sleep(60)
"""
)


def write_scripts(workspace: Path) -> dict[str, str]:
    """The scripts, written into the workspace; returns the command of each."""
    commands = {}
    for name, text in {
        "root": ROOT,
        "worker": WORKER,
        "fanout": FANOUT,
        "prober": PROBER,
        "keeper": KEEPER,
    }.items():
        (workspace / f"{name}.py").write_text(text)
        commands[name] = f"{shlex.quote(sys.executable)} {name}.py"
    return commands
