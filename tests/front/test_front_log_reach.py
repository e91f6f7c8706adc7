"""Issue 24 under the front: the worker is not root, so its runs share its uid; they must
still not reach the session's log (``.foldline/``), by its path, through the worker's
``/proc/<pid>/root`` or fds, or by unmounting what covers it."""

from __future__ import annotations

import os
import time

import pytest

from adapters.front.settings import session_key
from tests.support.front import SID_A, front, place, wait_until

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="the front needs root (mounts)"),
]
# Each probe says ``reached`` when it got at the log, and nothing else changes the db.
PROBE = (
    "cat >/dev/null; echo uid=$(id -u);"
    " true >> .foldline/foldline.db 2>/dev/null && echo reached=open-append;"
    " head -c 15 .foldline/foldline.db 2>/dev/null | grep -q SQLite && echo reached=read;"
    " for p in /proc/[0-9]*; do head -c 15 $p/root$PWD/.foldline/foldline.db 2>/dev/null"
    " | grep -q SQLite && echo reached=proc-root; for f in $p/fd/*; do"
    ' case "$(readlink $f 2>/dev/null)" in *foldline.db) echo reached=proc-fd;; esac; done;'
    " done;"
    " umount -l .foldline 2>/dev/null; umount .foldline 2>/dev/null;"
    " unshare --user --map-root-user --mount sh -c 'umount -l .foldline' 2>/dev/null;"
    " head -c 15 .foldline/foldline.db 2>/dev/null | grep -q SQLite && echo reached=unmounted;"
    " mv .foldline moved 2>/dev/null && echo reached=moved;"
    " echo end"
)


def test_a_run_under_the_front_cannot_reach_the_sessions_log() -> None:
    with place() as where:
        where.mount()
        with front(where, {"FOLDLINE_RUNNER": PROBE}) as served:
            status, answer = served.invoke({"prompt": "snoop"})
            assert status == 200, answer
            lines = answer["result"].splitlines()
            assert lines[0] == "uid=1000" and lines[-1] == "end", lines
            assert [line for line in lines if line.startswith("reached=")] == [], lines
            status, answer = served.invoke({"prompt": "again"})  # the log still serves
            assert status == 200 and answer["status"] == "ok", answer
        db = where.base / SID_A / ".foldline" / "foldline.db"
        assert db.read_bytes()[:15] == b"SQLite format 3"


# Marks itself up, then becomes a program with no TERM handler of its own.
STOPPABLE = "cat >/dev/null; touch up; exec sleep 60"


def test_a_run_under_the_front_gets_its_graceful_stop() -> None:
    """The run is not its pid namespace's PID 1 (which ignores a SIGTERM it has no handler
    for), so a session's graceful stop ends it at once, not after the grace."""
    with place() as where:
        where.mount()
        session = where.base / SID_A
        env = {"FOLDLINE_RUNNER": STOPPABLE, "FOLDLINE_STOP_GRACE_S": "40"}
        with front(where, env) as served:
            status, receipt = served.invoke({"prompt": "wait", "async": True})
            assert status == 200, receipt
            wait_until(lambda: (session / "up").exists(), what="the run up")
            asked = time.monotonic()
            status, _, body = served.request(
                "POST",
                f"/v1/sessions/{receipt['session']}/stop",
                {"reason": "test"},
                headers={
                    "Authorization": "Bearer test-operator-token",
                    "Content-Type": "application/json",
                },
            )
            assert status == 200, body
            assert time.monotonic() - asked < 20  # the TERM ended it; the grace is 40 s


# The worker's state directory ``$S`` (its home too): the log's anchor, the runs' homes.
# Each probe says ``reached`` when it got at it; the run's own home stays its to write.
STATE_PROBE = (
    "cat >/dev/null; S={state}; A=$S/anchors; echo uid=$(id -u);"
    ' touch "$HOME/mine" && echo home=writable;'
    ' ls -A "$S" | grep -q anchors && echo reached=list-state;'
    ' cat "$A"/*.json 2>/dev/null | grep -q hash && echo reached=read-anchor;'
    ' for f in "$A"/*.json; do echo tampered 2>/dev/null > "$f" && echo reached=rewrite-anchor;'
    " done;"
    ' mkdir "$S/planted" 2>/dev/null && echo reached=write-state;'
    ' mkdir "$S/../.local" 2>/dev/null && echo reached=write-above;'
    " for p in /proc/[0-9]*; do"
    ' cat $p/root"$A"/*.json 2>/dev/null | grep -q hash && echo reached=proc-root-read;'
    ' for f in $p/root"$A"/*.json; do echo tampered 2>/dev/null > "$f"'
    " && echo reached=proc-root-rewrite; done;"
    ' for f in $p/fd/*; do case "$(readlink $f 2>/dev/null)" in'
    ' "$S"/*) echo reached=proc-fd;; esac; done;'
    " done;"
    ' umount -l "$S" 2>/dev/null; umount "$S" 2>/dev/null;'
    ' unshare --user --map-root-user --mount sh -c \'umount -l "$0"\' "$S" 2>/dev/null;'
    ' cat "$A"/*.json 2>/dev/null | grep -q hash && echo reached=unmounted;'
    ' rm -rf "$A" 2>/dev/null; mv "$S" "$S.moved" 2>/dev/null && echo reached=moved;'
    " echo end"
)


def test_a_run_under_the_front_cannot_reach_the_workers_state() -> None:
    """The anchor the missing-log check trusts, and the rest of the worker's state and home,
    are its uid's: a run sees the state directory covered but for its own home."""
    with place() as where:
        where.mount()
        front_state = where.root / "front-state"
        state = front_state / "front-worker" / session_key(where.base / SID_A) / "state"
        env = {
            "FOLDLINE_STATE_DIR": str(front_state),
            "FOLDLINE_RUNNER": STATE_PROBE.format(state=state),
        }
        with front(where, env) as served:
            status, answer = served.invoke({"prompt": "snoop"})
            assert status == 200, answer
            lines = answer["result"].splitlines()
            assert lines[0] == "uid=1000" and lines[-1] == "end", lines
            assert "home=writable" in lines, lines
            assert [line for line in lines if line.startswith("reached=")] == [], lines
            status, answer = served.invoke({"prompt": "again"})  # the worker still serves
            assert status == 200 and answer["status"] == "ok", answer
        anchors = list((state / "anchors").glob("*.json"))
        assert anchors, sorted(state.rglob("*"))
        assert all(b'"hash"' in anchor.read_bytes() for anchor in anchors)
        assert not (state / "planted").exists()
        assert not (state.parent / ".local").exists()
        # The run's home was its own fresh one, gone with it (ADR 0064).
        assert not (state / "home" / "1000" / "mine").exists()
