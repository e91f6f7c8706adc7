"""The one place a prompt is read: inline text, or a file of the workspace a run may hand over
(design.md §7), read the careful way a root server must."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

PROMPT_LIMIT = 1 << 20


def read_prompt(workspace: Path, prompt: str, prompt_file: str, private: Path) -> bytes:
    """The run's stdin: the workspace file named by ``prompt_file``, else ``prompt``.

    A root server reads the file a run may have just swapped for a link, a FIFO or a device,
    so it is read the careful way, each time (dispatch and resume alike): the last component
    is never followed as a link, nothing blocks on opening it, and the file opened is judged
    by what it is: a regular file of at most 1 MiB whose real path lies in the workspace and
    outside ``private`` (the log's directory, the operator token's).

    Raises:
        OSError: the file cannot be read, or is not one a run may hand over.
    """
    if not prompt_file:
        return prompt.encode()
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    descriptor = os.open(workspace / prompt_file, flags)
    try:
        info = os.fstat(descriptor)
        real = Path(os.readlink(f"/proc/self/fd/{descriptor}"))
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if not real.is_relative_to(workspace.resolve()) or real.is_relative_to(private.resolve()):
            raise OSError(errno.EACCES, "not a file of the workspace a run may hand over")
        data = os.read(descriptor, PROMPT_LIMIT + 1)
    finally:
        os.close(descriptor)
    if len(data) > PROMPT_LIMIT:
        raise OSError(errno.EFBIG, f"more than {PROMPT_LIMIT} bytes")
    return data


def join_prompts(prompts: list[bytes]) -> bytes:
    """A run's stdin from the prompts it answers, oldest first (ADR 0048): one prompt is
    given as it is; several are each stripped of trailing newlines and joined by one blank
    line (the last one kept whole)."""
    *earlier, last = prompts
    return b"".join(p.rstrip(b"\n") + b"\n\n" for p in earlier) + last
