"""The files of an A2A task's result: the job's ``MEDIA:`` files as parts of the result
artifact, and the read-only route that serves them (``GET /a2a/tasks/{task_id}/files/{n}``).

Where a caller can reach the route (``adapters.settings.public_url.file_route_base``: a
``FOLDLINE_PUBLIC_URL`` that is not AgentCore's invoke URL), a small file travels inline
(``raw``, base64) within ``WITH_ROUTE`` and any other file is a ``url`` part naming the route.
Where it cannot (AgentCore forwards only its protocol's paths), every file travels inline within
``INLINE_ONLY``, sized to AgentCore's limits, and a file that cannot is a ``data`` part
describing it (name, media type, size, why), never a URL nobody can follow. A listing sends no
bytes: URL parts, or those descriptions.

The route serves only a file the task's job recorded, by its index in that manifest, from the
workspace: never a path the caller names, never one that resolves outside the workspace or into
``.foldline``, never through a symlink out of it. A file gone since the job recorded it is a
404; one whose size differs (rewritten since) a 410, so a caller never takes another run's bytes
for this result. The route has the access A2A has: foldline does not authenticate ``POST /``
(the platform in front of it does), nor this.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

import falcon

from adapters.http.errors import ApiError
from adapters.http.ports import ServerRuntime
from adapters.settings.config import ServerConfig
from adapters.settings.public_url import file_route_base
from engine.domain.job import FileEntry
from engine.domain.rows import TaskRow


@dataclass(frozen=True)
class Limits:
    """How many bytes of files an answer sends inline: ``per_file`` of one file, ``per_answer``
    of all of them (counted before base64, which adds a third)."""

    per_file: int
    per_answer: int


# With the file route reachable: only small files inline, the rest by URL (one round trip
# saved for an icon, no multi-megabyte JSON for a report the caller may never open).
WITH_ROUTE = Limits(per_file=64 << 10, per_answer=256 << 10)
# Without it, inline is the only way, within AgentCore's limits: 100 MB a request or response
# payload, 10 MB a streaming chunk. A stream's last artifact update carries every inline file in
# one SSE frame (one chunk) beside the result text (up to 1 MiB): 5 MiB of files is 7.0 MB of
# base64, which with 1 MiB of text leaves that frame about 2 MB under 10 MB. A file may take 4 MiB
# of it, so one large file still leaves room for the small ones after it.
INLINE_ONLY = Limits(per_file=4 << 20, per_answer=5 << 20)


def media_type(name: str) -> str:
    """The file's media type guessed from its extension; ``application/octet-stream`` else."""
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def file_path(task_id: str, n: int) -> str:
    """The route's path of the task's ``n``-th file, relative to the server's public URL."""
    return f"a2a/tasks/{quote(task_id, safe='')}/files/{n}"


def _gone(entry: FileEntry) -> ApiError:
    return ApiError(
        falcon.HTTP_410,
        "file_changed",
        f"{entry.path} changed since the job recorded it ({entry.size} bytes then)",
    )


def _not_found(message: str) -> ApiError:
    return ApiError(falcon.HTTP_404, "not_found", message)


def open_recorded(workspace: Path, entry: FileEntry) -> tuple[int, int]:
    """An open read-only descriptor of the recorded file, and its size.

    Raises:
        ApiError: 404 when the file is gone, is no regular file, or resolves outside the
            workspace or into ``.foldline``; 410 when its size is not the recorded one.
    """
    root = workspace.resolve()
    relative = entry.workspace_path or entry.path
    try:
        target = (root / relative).resolve(strict=True)
    except (OSError, RuntimeError):  # gone, or a symlink loop
        raise _not_found(f"{entry.path} is no longer in the workspace") from None
    if not target.is_relative_to(root) or ".foldline" in target.relative_to(root).parts:
        raise _not_found(f"{entry.path} is not a workspace file")
    try:  # the resolved path, not followed again: a symlink swapped in meanwhile is refused
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        raise _not_found(f"{entry.path} is no longer in the workspace") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _not_found(f"{entry.path} is not a regular file")
    if info.st_size != entry.size:
        os.close(fd)
        raise _gone(entry)
    return fd, info.st_size


def _read(workspace: Path, entry: FileEntry) -> bytes | ApiError:
    """The recorded file's bytes, or why it cannot be served as recorded."""
    try:
        fd, size = open_recorded(workspace, entry)
    except ApiError as refused:
        return refused
    with os.fdopen(fd, "rb") as file:
        data = file.read(size + 1)
    return data if len(data) == size else _gone(entry)


def description(name: str, size: int, reason: str, message: str) -> dict[str, Any]:
    """A ``data`` part standing for a file this answer does not carry: its ``filename``,
    ``mediaType`` and ``size``, ``omitted`` (why, a stable code) and ``message`` (the same for
    a person). No ``filename`` on the part itself: its content is this description, not the
    file."""
    return {
        "data": {
            "omitted": reason,
            "filename": name,
            "mediaType": media_type(name),
            "size": size,
            "message": message,
        }
    }


@dataclass(frozen=True)
class Parts:
    """A task's file parts for one answer. ``base_url``: where callers reach the file route
    (ends in ``/``), None when they cannot (``adapters.settings.public_url.file_route_base``); with
    ``inline`` False (a listing) no bytes are read: URL parts, or descriptions without a URL."""

    base_url: str | None
    workspace: Path
    inline: bool = True

    @property
    def limits(self) -> Limits:
        return WITH_ROUTE if self.base_url is not None else INLINE_ONLY

    def __call__(self, row: TaskRow) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        limits = self.limits
        budget = limits.per_answer
        for n, entry in enumerate(row.files):
            name = PurePosixPath(entry.path).name
            read: bytes | ApiError | None = None
            if self.inline and entry.size <= min(limits.per_file, budget):
                read = _read(self.workspace, entry)
            if isinstance(read, bytes):
                budget -= len(read)
                raw = base64.b64encode(read).decode("ascii")
                parts.append({"raw": raw, "filename": name, "mediaType": media_type(name)})
            elif self.base_url is not None:  # the route says why, should the file be unservable
                url = self.base_url + file_path(row.task_id, n)
                parts.append({"url": url, "filename": name, "mediaType": media_type(name)})
            else:
                parts.append(self._description(name, entry.size, read))
        return parts

    def _description(self, name: str, size: int, refused: ApiError | None) -> dict[str, Any]:
        """The description of a file that cannot go inline, where no URL can stand for it."""
        limits = self.limits
        if refused is not None:
            return description(name, size, "unavailable", refused.message)
        if not self.inline:
            return description(
                name, size, "listing", f"{name}: a listing sends no file bytes; GetTask does"
            )
        if size > limits.per_file:
            return description(
                name,
                size,
                "too_large",
                f"{name} is {size} bytes, over the {limits.per_file} bytes a file may send inline,"
                " and this server offers no file URLs (FOLDLINE_PUBLIC_URL)",
            )
        return description(
            name,
            size,
            "over_budget",
            f"{name} ({size} bytes) does not fit in the {limits.per_answer} bytes of files an"
            " answer sends inline, and this server offers no file URLs (FOLDLINE_PUBLIC_URL)",
        )


def parts_for(config: ServerConfig, *, inline: bool = True) -> Parts:
    """The file parts of this server's answers: URLs on ``FOLDLINE_PUBLIC_URL`` where that
    reaches the file route, else inline only (never the request's own origin: behind a
    platform that is the container's, which callers cannot reach)."""
    base = file_route_base(config.public_url)
    return Parts(base, config.workspace, inline)


class TaskFile:
    """``GET /a2a/tasks/{task_id}/files/{n}``: the ``n``-th file of the task's result, read
    only; errors as ``/v1`` writes them (``{"error": {"code", "message"}}``)."""

    def __init__(self, runtime: ServerRuntime) -> None:
        self.runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response, task_id: str, n: str) -> None:
        row = self.runtime.reads.task(task_id)
        if row is None:
            raise _not_found(f"task {task_id} not found")
        if not (n.isascii() and n.isdigit()) or int(n) >= len(row.files):
            raise _not_found(f"task {task_id} has no file {n}")
        entry = row.files[int(n)]
        fd, size = open_recorded(self.runtime.config.workspace, entry)
        name = PurePosixPath(entry.path).name
        resp.content_type = media_type(name)
        resp.set_header("Content-Disposition", f"attachment; filename*=UTF-8''{quote(name)}")
        resp.set_header("X-Content-Type-Options", "nosniff")
        resp.cache_control = ["private", "no-cache"]
        resp.set_stream(os.fdopen(fd, "rb"), size)  # closed by the server when sent
