"""The files of an inbound A2A message: checked in memory, then saved in the task's directory.

They are fetched and checked before any task exists, and saved into the workspace once the
message's task is known (docs/a2a.md "File parts").

Where they go: ``a2a-files/<task id>/<message>/<part index>-<name>`` in the workspace, with a
``manifest.json`` beside them (one entry per file: ``path``, ``name``, ``mediaType``, ``size``,
``sha256``). ``<message>`` is the messageId when it is a safe path segment, else ``m-`` and
16 hex digits of its sha256; messageIds are unique in a workspace, so each message has a
directory of its own, and saving one again (a plan tried again) rewrites the same files.

Limits: 5 MB per file, 10 MB per message (the source system's limits for images). A ``url``
part is fetched only where the URL policy (``adapters.system.url_policy``) allows, each redirect
judged again, read within ``FETCH_TIMEOUT_S``, at most one byte over the limit.

Saving never follows a link: each directory is opened relative to its parent without following
links, so a run that put a link where a directory goes makes the save fail, not write elsewhere.
Each file is written under a temporary name, synced and renamed, so a crash never leaves a
half file under its final name. Files are 0644 in 0755 directories, and the run user's when
the server runs as root (the workspace is theirs, ``adapters.services.sandbox``).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import mimetypes
import os
import re
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from adapters.system import outbound
from adapters.system.url_policy import UrlPolicy, UrlRefused

FILE_LIMIT = 5_000_000
MESSAGE_LIMIT = 10_000_000
URL_PARTS = 4  # fetched one after another, each within FETCH_TIMEOUT_S: a bounded wait
FETCH_TIMEOUT_S = 15.0
ROOT = "a2a-files"
MANIFEST = "manifest.json"
NAME_MAX = 100  # a saved name's characters, before the part index
ENV = "FOLDLINE_A2A_FILES"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
_HASHED = re.compile(r"m-[0-9a-f]{16}")
_CHUNK = 64 << 10


class FetchFailed(ValueError):
    """A ``url`` part could not be fetched; the message says why."""


@dataclass(frozen=True)
class LoadedFile:
    """One file part, in memory: its index among the message's parts, the name the caller
    gave (or None), its media type and its bytes."""

    index: int
    filename: str | None
    media_type: str
    content: bytes

    @property
    def saved_name(self) -> str:
        return f"{self.index}-{safe_name(self.filename, self.media_type, self.index)}"


@dataclass(frozen=True)
class Saved:
    """What saving a message's files gave: the prompt's lines and the manifest's path."""

    lines: tuple[str, ...]
    manifest: Path


def safe_name(filename: str | None, media_type: str, index: int) -> str:
    """``filename`` as a name to save under: its last path segment, characters other than
    letters, digits, ``.``, ``_`` and ``-`` as ``_``, no leading dot, at most ``NAME_MAX``
    characters (the extension kept). None or nothing left: ``file-<index>`` and an extension
    for ``media_type``."""
    base = re.split(r"[/\\]", filename or "")[-1]
    name = _UNSAFE.sub("_", base).lstrip(".")
    if len(name) > NAME_MAX:
        stem, dot, ext = name.rpartition(".")
        ext = ext[:16] if dot and stem else ""
        name = name[: NAME_MAX - len(ext) - 1] + "." + ext if ext else name[:NAME_MAX]
    if name.strip("._-"):
        return name
    return f"file-{index}{mimetypes.guess_extension(media_type, strict=False) or ''}"


def segment(value: str) -> str:
    """``value`` as one directory name: itself when it is safe, else ``m-`` and 16 hex digits
    of its sha256 (never the same as a safe value: one that looks hashed is hashed too)."""
    if _SEGMENT.fullmatch(value) and not _HASHED.fullmatch(value):
        return value
    return "m-" + hashlib.sha256(value.encode()).hexdigest()[:16]


def media_type_of(given: str | None, filename: str | None, served: str | None = None) -> str:
    """The part's ``mediaType``, else what the server said it sent, else a guess from the name."""
    for candidate in (given, served):
        if candidate and "/" in candidate:
            return candidate.split(";")[0].strip().lower()
    guessed, _ = mimetypes.guess_type(filename or "", strict=False)
    return guessed or "application/octet-stream"


def check_size(index: int, size: int, total: int) -> None:
    """Raises: ValueError naming the limit ``size`` (part ``index``'s file) or ``total``
    (the message's files so far) passes."""
    if size > FILE_LIMIT:
        raise ValueError(
            f"part {index}: the file exceeds the 5 MB limit per file ({FILE_LIMIT} bytes)"
        )
    if total > MESSAGE_LIMIT:
        raise ValueError(
            f"the message's files exceed the 10 MB limit per message ({MESSAGE_LIMIT} bytes)"
        )


# -- fetching ----------------------------------------------------------------------------------


class _Judged(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to a place the policy allows."""

    def __init__(self, policy: UrlPolicy) -> None:
        self.policy = policy

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        self.policy.check_resolved(newurl)  # UrlRefused: out of ``fetch`` as it is
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch(
    url: str, policy: UrlPolicy, timeout_s: float = FETCH_TIMEOUT_S
) -> tuple[bytes, str | None]:
    """The body at ``url`` (at most ``FILE_LIMIT`` bytes) and the media type it was served as.

    The whole exchange (redirects included) has ``timeout_s`` (``adapters.system.outbound``): a
    server that drips its status line or its bytes is cut off. Proxies from the environment are not
    used: the address the policy judged is the one called.

    Raises:
        UrlRefused: the policy refuses the URL (or a redirect's target).
        FetchFailed: not 2xx, over ``FILE_LIMIT``, too slow, or a connection error.
    """
    policy.check_resolved(url)
    deadline = time.monotonic() + timeout_s
    opener = outbound.opener(deadline, _Judged(policy))  # one deadline, redirects and all
    too_big = FetchFailed(f"{url!r} exceeds the 5 MB limit per file ({FILE_LIMIT} bytes)")
    try:
        with opener.open(url, timeout=timeout_s) as answer:
            length = answer.headers.get("Content-Length", "")
            if length.isdigit() and int(length) > FILE_LIMIT:
                raise too_big
            chunks: list[bytes] = []
            read = 0
            while chunk := answer.read1(min(_CHUNK, FILE_LIMIT + 1 - read)):
                if time.monotonic() > deadline:
                    raise FetchFailed(f"fetching {url!r} took over {timeout_s:g} s")
                chunks.append(chunk)
                read += len(chunk)
                if read > FILE_LIMIT:
                    raise too_big
            if time.monotonic() >= deadline:  # cut off at the deadline: the body is short
                raise FetchFailed(f"fetching {url!r} took over {timeout_s:g} s")
            served = answer.headers.get_content_type() if "Content-Type" in answer.headers else None
            return b"".join(chunks), served
    except (UrlRefused, FetchFailed):
        raise
    except urllib.error.HTTPError as ex:
        ex.close()
        raise FetchFailed(f"fetching {url!r} answered HTTP {ex.code}") from None
    except urllib.error.URLError as ex:
        if isinstance(ex.reason, UrlRefused):
            raise ex.reason from None
        raise FetchFailed(f"fetching {url!r} failed: {ex.reason}") from None
    except (TimeoutError, OSError, http.client.HTTPException, ValueError) as ex:
        if time.monotonic() >= deadline:
            raise FetchFailed(f"fetching {url!r} took over {timeout_s:g} s") from None
        raise FetchFailed(f"fetching {url!r} failed: {type(ex).__name__}: {ex}") from None


def file_name_of(url: str) -> str | None:
    """The last segment of the URL's path, if any: the name a ``url`` part without a
    ``filename`` is saved under."""
    tail = unquote(urlsplit(url).path).rsplit("/", 1)[-1]
    return tail or None


# -- saving ------------------------------------------------------------------------------------


def message_dir(task_id: str, message_id: str) -> str:
    """The message's directory, relative to the workspace."""
    return f"{ROOT}/{segment(task_id)}/{segment(message_id)}"


@contextlib.contextmanager
def _opened_dirs(workspace: Path, relative: str, owner: tuple[int, int] | None) -> Iterator[int]:
    """An fd of ``workspace/relative``, each directory made (0755, ``owner``'s) when missing and
    opened without following a link. Raises: OSError."""
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in relative.split("/"):
            made = True
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
            except FileExistsError:
                made = False
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
            if made:  # through the fd: a name swapped meanwhile is never what is changed
                os.fchmod(fd, 0o755)  # whatever the umask took
                if owner is not None:
                    os.fchown(fd, *owner)
        yield fd
    finally:
        os.close(fd)


def _write(fd: int, name: str, content: bytes, owner: tuple[int, int] | None) -> None:
    """``content`` as ``name`` in the directory ``fd``: a temporary name, synced, renamed."""
    temporary = f".{name}.{secrets.token_hex(4)}.tmp"
    handle = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd
    )
    try:
        try:
            os.fchmod(handle, 0o644)
            if owner is not None:
                os.fchown(handle, *owner)
            view = memoryview(content)
            while view:
                view = view[os.write(handle, view) :]
            os.fsync(handle)
        finally:
            os.close(handle)
        os.rename(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=fd)
        raise


def save(
    workspace: Path,
    task_id: str,
    message_id: str,
    files: Sequence[LoadedFile],
    owner: tuple[int, int] | None = None,
) -> Saved:
    """Write ``files`` and their manifest into the message's directory.

    Raises:
        OSError: a directory or file could not be made or written (a full disk, a link in
            the way); files written before stay, the manifest is not written.
    """
    relative = message_dir(task_id, message_id)
    entries: list[dict[str, Any]] = []
    lines = []
    with _opened_dirs(workspace, relative, owner) as fd:
        for file in files:
            name = file.saved_name
            _write(fd, name, file.content, owner)
            # Absolute: a run may start elsewhere than the workspace's root (a writer's
            # worktree, a session directory), where the untracked files are not.
            path = str(workspace / relative / name)
            size = len(file.content)
            entries.append(
                {
                    "path": path,
                    "name": file.filename,
                    "mediaType": file.media_type,
                    "size": size,
                    "sha256": hashlib.sha256(file.content).hexdigest(),
                }
            )
            lines.append(f"FILE: {path} ({file.media_type}, {size} bytes)")
        _write(fd, MANIFEST, json.dumps(entries, indent=1).encode() + b"\n", owner)
    return Saved(tuple(lines), workspace / relative / MANIFEST)


def prompt(text: str, saved: Saved) -> str:
    """The message's text, then one line per file."""
    return "\n".join((text, *saved.lines) if text else saved.lines)
