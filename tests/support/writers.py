"""Git workspaces and runner scripts for the writers tests (issue 28): a root agent that spawns
writers, judges and integrates them over ``/v1``, and a writer that edits what its prompt says."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.agents import python_agent
from tests.support.coordination import CALL

# The writer: its prompt is JSON {"write": {path: text}, "append": {path: text}, "delete":
# [path], "replace":
# [[folder, old, new]], "commit": bool, "hold": bool}: with "hold", a first run (not a resumed
# one) then waits to be killed.
WRITER = """
import json, os, subprocess, sys
order = json.loads(sys.stdin.read())
for path, text in order.get("write", {}).items():
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as out:
        out.write(text)
for path, text in order.get("append", {}).items():
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a") as out:
        out.write(text)
for path in order.get("delete", []):
    os.remove(path)
for folder, old, new in order.get("replace", []):  # every file under folder, old -> new
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as source:
            text = source.read()
        with open(os.path.join(folder, name), "w") as out:
            out.write(text.replace(old, new))
if order.get("commit"):
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(["git", "-c", "user.name=w", "-c", "user.email=w@example.org", "commit", "-qm",
                    "writer's own commit"], check=True)
print("cwd=" + os.getcwd())
print("worktree=" + os.environ.get("FOLDLINE_WORKTREE", ""))
if order.get("hold") and os.environ.get("FOLDLINE_RESUMED") != "1":
    import time
    for _ in range(600):  # the test kills, cancels or stops it first (30 s at most)
        time.sleep(0.05)
    sys.exit(3)
"""

# The root: runs the steps its prompt lists ({name, writers: [[scope, order]], integrate}),
# printing one JSON line per step: spawn one batch, wait, look at its own tree, then read,
# accept and integrate each writer in turn.
ROOT = (
    CALL
    + """
import subprocess

def say(step, status, body):
    print(json.dumps({"step": step, "status": status, "body": body}), flush=True)

def tree():
    return subprocess.run(["git", "-c", "safe.directory=*", "status", "--porcelain"],
                          capture_output=True, text=True, check=True).stdout

def spawn(orders):
    status, body = call("POST", "/v1/jobs", {"jobs": [
        {"agent": "writer", "prompt": json.dumps(order), "write_scope": scope}
        for scope, order in orders]})
    return status, body

def judge(job_id, step):
    call("GET", "/v1/jobs/" + job_id + "/result")
    call("POST", "/v1/jobs/" + job_id + "/result/accept", {"reason": "good"})
    say(step, *call("POST", "/v1/jobs/" + job_id + "/result/integrate"))

for step in json.loads(sys.stdin.read()):
    name = step["name"]
    status, body = spawn(step["writers"])
    say(name + " spawned", status, body)
    if status != 201:
        continue
    ids = [job["job_id"] for job in body["jobs"]]
    say(name + " waited", 200, wait_all(ids))
    say(name + " tree before", 200, tree())
    if step.get("integrate", True):
        for n, job_id in enumerate(ids):
            judge(job_id, name + " integrate " + str(n))
        say(name + " tree after", 200, tree())
"""
)


def git(workspace: Path, *args: str) -> str:
    """git in ``workspace`` as the test's user, whoever owns it."""
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=workspace,
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.org",
        },
    )
    return done.stdout


def repository(workspace: Path, files: dict[str, str]) -> str:
    """``workspace`` as a git repository with ``files`` committed (and foldline's directory
    ignored); its HEAD."""
    workspace.mkdir(parents=True, exist_ok=True)
    git(workspace, "init", "-q", "-b", "main")
    (workspace / ".gitignore").write_text(".foldline/\n")
    for path, text in files.items():
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / path).write_text(text)
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "start")
    return git(workspace, "rev-parse", "HEAD").strip()


def agents_file(where: Path, scripts_dir: Path, python: str = "", **limits: Any) -> Path:
    """The agents file: a root that may spawn writers, and the writer (workspace-write), run
    by ``python`` (default: this interpreter; another user may need the system's)."""
    scripts_dir.mkdir(parents=True, exist_ok=True)
    (scripts_dir / "root.py").write_text(ROOT)
    (scripts_dir / "writer.py").write_text(WRITER)

    def command(script: str) -> str:
        path = str(scripts_dir / script)
        return json.dumps(f"{python} {path}" if python else python_agent(path))

    lines = [
        "[agents.root]",
        f"command = {command('root.py')}",
        'can_spawn = ["writer"]',
        "max_children = 8",
        "[agents.writer]",
        f"command = {command('writer.py')}",
        'mode = "workspace-write"',
        "max_active = 8",
        "[limits]",
        "max_active_writers = 4",
        *(f"{k} = {v}" for k, v in limits.items()),
    ]
    agents = where / "agents.toml"
    agents.write_text("\n".join(lines) + "\n")
    return agents


def steps(result: str) -> dict[str, dict[str, Any]]:
    """The root's printed steps by name."""
    found = {}
    for line in result.splitlines():
        if line.startswith("{"):
            step = json.loads(line)
            found[step["step"]] = step
    return found
