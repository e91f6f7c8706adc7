"""A runner that turns on the server it runs under (ADR 0029), as root, the container's and CI's
case: with the default run user, every attack on the log, the operator's token and the server's
processes fails, the runner's ordinary work in the workspace succeeds, the server keeps serving,
and the log still verifies with every earlier job in it.

Each attack prints ``ATTACK <name> exit=<code> <first line of its error>``; each tool it uses is
first shown to work on the runner's own files (``CONTROL ...``), so a refusal is the sandbox's,
never a missing tool's.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.system.processes import ENV_ALLOWLIST
from tests.support import runners
from tests.support.cli import foldline
from tests.support.server import serve

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="runs as another user only under a root server"),
]

HOSTILE = r"""
cat > prompt.txt
read -r victim_job victim_session server_pid worker_pid < prompt.txt
case $victim_job in earlier) echo "ordinary work: $victim_session"; exit 0;; esac
say() { printf '%s\n' "$*"; }
attack() {
    name=$1; shift
    out=$("$@" 2>&1)
    code=$?
    say "ATTACK $name exit=$code $(printf '%s' "$out" | tail -n 1)"
}
control() {
    name=$1; shift
    if out=$("$@" 2>&1); then say "CONTROL $name ok"; else say "CONTROL $name FAILED $out"; fi
}
http() {  # method path [token]: prints the status code
    if [ -n "$3" ]; then auth="Authorization: Bearer $3"; else auth="X-None: none"; fi
    code=$(curl -s --path-as-is -o /dev/null -w '%{http_code}' -X "$1" -H "$auth" "$FOLDLINE_URL$2")
    [ "$code" -lt 300 ] && return 0
    echo "HTTP $code"; return 1
}

echo mine > mine.txt
control write-a-file test -s mine.txt
control sqlite3-cli sqlite3 own.db "create table t(x); insert into t values (1)"
control python-sqlite3 python3 -c "$(printf '%s\n' 'import sqlite3' \
    "sqlite3.connect('own2.db').execute('create table t(x)')")"
control signal-itself kill -0 $$
control move-own-file mv own.db own3.db
control curl curl -s -o /dev/null "$FOLDLINE_URL/ping"

attack rm-rf rm -rf .foldline
attack git-clean sh -c 'git init -q . && git clean -xfdq'
attack mv-away mv .foldline elsewhere
attack rename-into-place sh -c 'mkdir -p decoy && mv decoy .foldline'
attack truncate truncate -s 0 .foldline/foldline.db
attack sqlite3-write sqlite3 .foldline/foldline.db "delete from events"
attack python-sqlite3-write python3 -c "$(printf '%s\n' 'import sqlite3' \
    "c = sqlite3.connect('.foldline/foldline.db')" "c.execute('delete from events')" 'c.commit()')"
attack read-token cat .foldline/foldline.db.token
attack list-log-dir ls -A .foldline/
attack read-server-environ cat /proc/$server_pid/environ
attack kill-server kill -9 $server_pid
attack kill-worker kill -9 "$worker_pid"  # named by the test: out of the run's pid namespace
attack kill-parent kill -9 $PPID
attack cancel-no-token http POST "/v1/jobs/$victim_job/cancel"
attack cancel-run-token http POST "/v1/jobs/$victim_job/cancel" "$FOLDLINE_RUN_TOKEN"
attack result-no-token http GET "/v1/jobs/$victim_job/result"
attack result-run-token http GET "/v1/jobs/$victim_job/result" "$FOLDLINE_RUN_TOKEN"
attack stream-no-token http GET "/v1/streams/session:$victim_session/events"
attack stream-run-token http GET "/v1/streams/session:$victim_session/events" "$FOLDLINE_RUN_TOKEN"
attack read-job-run-token http GET "/v1/jobs/$victim_job" "$FOLDLINE_RUN_TOKEN"
attack cancel-slashes-no-token http POST "//v1/jobs/$victim_job/cancel"
attack events-slashes-no-token http GET "//v1/events"
attack console-slashes-no-token http GET "//console/api/overview"

echo after > after.txt
control write-after-attacks test -s after.txt
control git-works git -c user.name=run -c user.email=run@localhost commit -q --allow-empty -m ok
control read-own-job http GET "/v1/jobs/$FOLDLINE_JOB_ID" "$FOLDLINE_RUN_TOKEN"
say "uid=$(id -u) home=$HOME"
say "STATUS $(grep -E '^(NoNewPrivs|CapInh|CapPrm|CapEff|CapBnd|CapAmb):' /proc/self/status \
    | tr -d '\t' | tr '\n' ' ')"
say "GROUPS $(id -G)"
say "ENV $(env | cut -d= -f1 | sort | tr '\n' ' ')"
"""

# Every attack the runner makes: the file ones need the server's uid or the log's directory in
# view, the process ones the server's uid, the HTTP ones the operator's token.
ATTACKS = {
    "rm-rf",
    "git-clean",
    "mv-away",
    "rename-into-place",
    "truncate",
    "sqlite3-write",
    "python-sqlite3-write",
    "read-token",
    "list-log-dir",
    "read-server-environ",
    "kill-server",
    "kill-worker",
    "kill-parent",
    "cancel-no-token",
    "cancel-run-token",
    "result-no-token",
    "result-run-token",
    "stream-no-token",
    "stream-run-token",
    "read-job-run-token",
    "cancel-slashes-no-token",
    "events-slashes-no-token",
    "console-slashes-no-token",
}


# The server's allowlist, what a run is told about itself, and what sh sets on its own.
ALLOWED_ENV = {
    *ENV_ALLOWLIST,
    *runners.RUN_OWN,
    *runners.SHELL_OWN,
    "GIT_CONFIG_COUNT",  # modes: the root-owned workspace root is a safe git directory
    "GIT_CONFIG_KEY_0",
    "GIT_CONFIG_VALUE_0",
}


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory the run user can walk into (pytest's own temporary root is root's 0700):
    the run's home lives in the state directory beside the workspace."""
    path = Path(tempfile.mkdtemp(prefix="foldline-hostile-"))
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _lines(result: str, kind: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in result.splitlines():
        if line.startswith(kind + " "):
            name, _, rest = line[len(kind) + 1 :].partition(" ")
            found.setdefault(name, []).append(rest)
    return found


@pytest.mark.parametrize("isolation", ["namespace", "auto"])
def test_a_hostile_runner_cannot_touch_the_log_the_token_or_the_server(
    base: Path, isolation: str
) -> None:
    """A mount and pid namespace per run hiding the log's directory, named or chosen by
    ``auto`` (``modes`` is refused at boot: ADR 0064)."""
    for tool in ("sqlite3", "python3", "curl", "git"):
        assert shutil.which(tool), f"{tool} is needed to run the attacks (.ci/run installs it)"
    workspace = base / "ws"
    workspace.mkdir()
    env = {
        "FOLDLINE_RUN_USER": "1000:1000",  # the default of a root server, said explicitly
        "FOLDLINE_RUN_ISOLATION": isolation,
        "FOLDLINE_TOKEN": "",  # the generated operator token, in the log's directory
        "FOLDLINE_RUNNER": HOSTILE,
        "FOLDLINE_AGENTS_FILE": str(base / "agents.toml"),
        "CHANNEL_SECRET": "for the notify hook only",  # never in a run's environment
    }
    (base / "agents.toml").write_text('[agents.sleeper]\ncommand = "cat >/dev/null; sleep 60"\n')
    with serve(workspace, env, workers=2) as server:
        for n in range(4):  # history the attacks would like to erase
            status, body = server.invoke({"prompt": f"earlier {n}", "id": f"earlier-{n}"})
            assert status == 200 and body["state"] == "ok", body
        status, victim = server.invoke({"prompt": "x", "agent": "sleeper", "async": True})
        assert status == 202 or status == 200, victim
        master = server.process.pid
        worker = Path(f"/proc/{master}/task/{master}/children").read_text().split()[0]
        prompt = f"{victim['invocation']} {victim['session']} {master} {worker}"
        status, body = server.invoke({"prompt": prompt}, timeout=120)
        assert status == 200, body
        result = body["result"]
        attacks, controls = _lines(result, "ATTACK"), _lines(result, "CONTROL")
        print(result)  # the closing note quotes what each attack answered
        assert set(attacks) == ATTACKS, result
        for name, answers in attacks.items():
            for answer in answers:
                assert not answer.startswith("exit=0"), f"{name} succeeded: {answer}"
                if name.endswith(("no-token", "run-token")):  # refused for the right reason
                    wanted = "HTTP 401" if name.endswith("no-token") else "HTTP 403"
                    assert answer.endswith(wanted), f"{name}: {answer}"
        assert all(answer == ["ok"] for answer in controls.values()), controls
        assert len(controls) == 9
        assert f"uid=1000 home={base}/ws.state/home/1000" in result
        # No capability of any kind, no way to gain one, no group but its own.
        (status_line,) = [line for line in result.splitlines() if line.startswith("STATUS ")]
        assert "NoNewPrivs:1" in status_line
        for kind in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert f"{kind}:0000000000000000" in status_line, status_line
        assert "GROUPS 1000\n" in result
        (env_line,) = [line for line in result.splitlines() if line.startswith("ENV ")]
        names = set(env_line.split()[1:])
        assert "CHANNEL_SECRET" not in names and "FOLDLINE_TOKEN" not in names
        assert names <= ALLOWED_ENV, names - ALLOWED_ENV

        # The server still serves, its processes and the victim job untouched.
        assert server.process.poll() is None
        status, again = server.invoke({"prompt": "x", "agent": "sleeper", "async": True})
        assert status in (200, 202), again
        token = (workspace / ".foldline" / "foldline.db.token").read_text().strip()
        status, _, raw = server.request(
            "GET", f"/v1/jobs/{victim['invocation']}", headers={"Authorization": f"Bearer {token}"}
        )
        assert status == 200 and json.loads(raw)["state"] == "running", raw
    # The runner's own files are the run user's; the log's directory is still root's own.
    assert (workspace / "after.txt").stat().st_uid == 1000
    info = (workspace / ".foldline").stat()
    assert (info.st_uid, info.st_mode & 0o777) == (0, 0o700)
    root = workspace.stat()
    assert (root.st_uid, root.st_mode & 0o7777) == (1000, 0o755)
    db = workspace / ".foldline" / "foldline.db"
    verified = foldline("verify", str(db))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["events"] > 20
    exported = foldline("export", str(db))
    assert exported.returncode == 0, exported.stderr
    for n in range(4):
        assert f'"earlier {n}"' in exported.stdout  # every earlier job is still in the log
