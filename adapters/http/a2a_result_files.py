"""The files of an A2A task's result: the job's ``MEDIA:`` files as ``file`` parts of the result
artifact, and the read-only route that serves them (``GET /a2a/tasks/{task_id}/files/{n}``).

A small file travels inline (``raw``, base64), up to ``INLINE_MAX`` bytes each and
``INLINE_TOTAL`` per answer; any other file, and every file of a listing, is a ``url`` part
naming the route. The route serves only a file the task's job recorded, by its index in that
manifest, from the workspace: never a path the caller names, never one that resolves outside
the workspace or into ``.foldline``, never through a symlink out of it. A file gone since the
job recorded it is a 404; one whose size differs (rewritten since) a 410, so a caller never
takes another run's bytes for this result. The route has the access A2A has: foldline does not
authenticate ``POST /`` (the platform in front of it does), nor this.
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

from adapters.http.a2a_card import interface_url
from adapters.http.errors import V1, ApiError
from adapters.runtime import Runtime
from engine.domain.job import FileEntry
from engine.domain.rows import TaskRow
from projections import queries

INLINE_MAX = 64 << 10  # bytes of one file sent inline
INLINE_TOTAL = 256 << 10  # bytes of all the files one answer sends inline


def media_type(name: str) -> str:
    """The file's media type guessed from its extension; ``application/octet-stream`` else."""
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def file_path(task_id: str, n: int) -> str:
    """The route's path of the task's ``n``-th file, relative to the A2A interface URL."""
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


def _small(workspace: Path, entry: FileEntry) -> bytes | None:
    """The recorded file's bytes, or None when it cannot be served as recorded (its URL
    part then says why to whoever follows it)."""
    try:
        fd, size = open_recorded(workspace, entry)
    except ApiError:
        return None
    with os.fdopen(fd, "rb") as file:
        data = file.read(size + 1)
    return data if len(data) == size else None


@dataclass(frozen=True)
class Parts:
    """A task's file parts for one answer: ``base_url`` the A2A interface URL (ends in
    ``/``); with ``inline`` False (a listing) every file is a URL part, no bytes are read."""

    base_url: str
    workspace: Path
    inline: bool = True

    def __call__(self, row: TaskRow) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        budget = INLINE_TOTAL
        for n, entry in enumerate(row.files):
            data = None
            if self.inline and entry.size <= min(INLINE_MAX, budget):
                data = _small(self.workspace, entry)
            part: dict[str, Any]
            if data is not None:
                budget -= len(data)
                part = {"raw": base64.b64encode(data).decode("ascii")}
            else:
                part = {"url": self.base_url + file_path(row.task_id, n)}
            name = PurePosixPath(entry.path).name
            parts.append({**part, "filename": name, "mediaType": media_type(name)})
        return parts


def parts_for(runtime: Runtime, req: falcon.Request, *, inline: bool = True) -> Parts:
    """The file parts of answers to ``req``: URLs built as the agent card's are
    (``FOLDLINE_PUBLIC_URL``, else the request's origin)."""
    base = interface_url(runtime.config.public_url, req.prefix)
    return Parts(base, runtime.config.workspace, inline)


class TaskFile:
    """``GET /a2a/tasks/{task_id}/files/{n}``: the ``n``-th file of the task's result, read
    only; errors as ``/v1`` writes them (``{"error": {"code", "message"}}``)."""

    errors = V1

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response, task_id: str, n: str) -> None:
        row = queries.task(self.runtime.engine.log.connection(), task_id)
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
