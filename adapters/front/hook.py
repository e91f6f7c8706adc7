"""The front's side of the notify hand-off: a worker's ``/notify``, checked, and the hook run.

Everything in a ``/notify`` is agent-controlled (the worker's token is readable by the agent,
who runs as the same user), so: the token compared in constant time (403), a body of at most
16 MiB holding ``{id, session, status, text}`` of the right shapes (400). Then ``FOLDLINE_NOTIFY``
runs with the front's environment (where the channel secrets are) in a root-only temporary
directory, which is also its ``FOLDLINE_WORKSPACE`` and cwd. A ``MEDIA:<path>`` line names a
file in the worker's view; it is copied into that directory only if, in the front's view
(``<base>/<sid>``), it opens with ``O_PATH`` (no side effect, never blocks on a FIFO), the file
actually opened resolves under the session's directory, is a regular file of at most 20 MB, and
its bytes are read through that same descriptor: no link or swap between the checks can point
root at another file. A refused line is dropped and logged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from adapters.system.processes import kill_group

log = logging.getLogger("foldline.front")
MAX_BODY = 16 << 20
MAX_MEDIA = 20_000_000
SESSION = re.compile(r"[A-Za-z0-9_:-]{1,200}")
JOB = re.compile(r"[A-Za-z0-9_:-]{1,200}")
TAIL = 1000


def parse(raw: bytes) -> dict[str, str] | None:
    """The notify's fields, or None when any is missing or of the wrong shape."""
    try:
        body: Any = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    job, session, status, text = (body.get(k) for k in ("id", "session", "status", "text"))
    if not (isinstance(job, str) and JOB.fullmatch(job)):
        return None
    if not (isinstance(session, str) and SESSION.fullmatch(session)):
        return None
    if status not in ("ok", "error") or not isinstance(text, str):
        return None
    return {"id": job, "session": session, "status": status, "text": text}


def copy_media(path_text: str, workspace: Path, session_dir: Path, into: Path) -> Path | str:
    """The copy of the worker's ``path_text`` in ``into``, or why it was refused."""
    named = Path(path_text) if path_text.startswith("/") else workspace / path_text
    normal = Path(os.path.normpath(named))
    if not normal.is_relative_to(workspace):
        return "outside the workspace"
    here = session_dir / normal.relative_to(workspace)
    try:
        fd = os.open(here, os.O_PATH | os.O_CLOEXEC)
    except OSError as ex:
        return f"cannot open: {ex.strerror}"
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if not opened.is_relative_to(session_dir) or opened == session_dir:
            return "resolves outside the workspace"
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_size > MAX_MEDIA:
            return "larger than 20 MB"
        target = into / str(len(os.listdir(into))) / opened.name
        target.parent.mkdir(mode=0o700)
        # The same open file, for reading: /proc/self/fd/N is the descriptor, not the path.
        with open(f"/proc/self/fd/{fd}", "rb") as source, open(target, "wb") as out:
            data = source.read(MAX_MEDIA + 1)
            if len(data) > MAX_MEDIA:
                return "larger than 20 MB"
            out.write(data)
        return target
    except OSError as ex:
        return f"unreadable: {ex.strerror}"
    finally:
        os.close(fd)


def run(
    command: str,
    fields: dict[str, str],
    workspace: Path,
    session_dir: Path,
    env: dict[str, str],
    timeout_s: float,
) -> dict[str, Any]:
    """Run the hook for one notify; its exit code, duration and output tails."""
    started = time.monotonic()
    place = Path(tempfile.mkdtemp(prefix="foldline-notify-"))  # 0700, root's
    try:
        lines = []
        for line in fields["text"].splitlines():
            if not line.startswith("MEDIA:"):
                lines.append(line)
                continue
            copied = copy_media(line[6:].strip(), workspace, session_dir, place)
            if isinstance(copied, Path):
                lines.append(f"MEDIA:{copied}")
            else:
                log.warning(
                    "front: notify %s: MEDIA dropped (%s): %r", fields["session"], copied, line[6:]
                )
        hook_env = {
            **env,
            "FOLDLINE_SESSION_ID": fields["session"],
            "FOLDLINE_JOB_ID": fields["id"],
            "FOLDLINE_RUN_STATUS": fields["status"],
            "FOLDLINE_WORKSPACE": str(place),
        }
        process = subprocess.Popen(
            ["sh", "-c", command],
            cwd=place,
            env=hook_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = process.communicate("\n".join(lines).encode(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(process.pid)
            out, err = process.communicate()
        kill_group(process.pid)
        return {
            "exit_code": process.returncode,
            "ms": int((time.monotonic() - started) * 1000),
            "stdout_tail": out[-TAIL:].decode("utf-8", "replace"),
            "stderr_tail": err[-TAIL:].decode("utf-8", "replace"),
        }
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(place)
