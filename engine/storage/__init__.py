"""The storage wing: every database backend of the log, behind one seam and one selector.

- ``engine.storage.seam``: the protocols a backend implements (``Storage``, ``Writer``,
  ``Wakeups``) and what it declares beyond them (``WriterCapabilities``);
- ``engine.storage.sqlite``: the SQLite backend, the default and the reference;
- ``engine.storage.postgres``: the PostgreSQL backend, an optional extra (psycopg).

``open_storage`` is the one place where a location picks a backend: a ``postgresql://`` URL is
PostgreSQL, anything else a SQLite file. Callers that only need to know what a location is
(show it, check it, tell a server from a file) ask ``parse_target``; nothing else looks at the
string. A backend module is imported only when a location of its kind is opened, so the SQLite
path never imports psycopg. A backend of one's own needs no entry here: ``engine.log``'s
``open_log_with`` takes any ``Storage``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from engine.errors import InvalidArgument, NotALog
from engine.storage.postgres.url import SCHEMES as POSTGRES_SCHEMES
from engine.storage.postgres.url import redact
from engine.storage.seam import (
    CommandOutcome,
    CommandRow,
    EventRow,
    HeadRow,
    Migration,
    Storage,
    Sync,
    Wakeups,
    Writer,
    WriterCapabilities,
    translated,
)

Backend = Literal["sqlite", "postgres"]


@dataclass(frozen=True)
class Target:
    """Where a log lives, as given, and which backend that names."""

    location: str
    backend: Backend

    @property
    def remote(self) -> bool:
        """Whether the log is on a server (a URL), not in a file of this machine."""
        return self.backend != "sqlite"

    @property
    def shown(self) -> str:
        """The location for messages and logs: a URL without its password."""
        return redact(self.location) if self.remote else self.location

    def absolute(self) -> Target:
        """The same log, a file's path made absolute (a URL stays as it is)."""
        return self if self.remote else replace(self, location=os.path.abspath(self.location))


def parse_target(location: str | os.PathLike[str]) -> Target:
    """What ``location`` names: a PostgreSQL URL, or (anything else) a SQLite file."""
    text = os.fspath(location)
    scheme, sep, _ = text.partition("://")
    if sep and scheme in POSTGRES_SCHEMES:
        return Target(text, "postgres")
    return Target(text, "sqlite")


def check_target(location: str | os.PathLike[str]) -> Target:
    """``parse_target``, refusing at once what ``open_storage`` would refuse before connecting:
    a malformed URL, or a PostgreSQL one without the extra installed. Connects to nothing.

    Raises:
        InvalidArgument: as above.
    """
    target = parse_target(location)
    if target.remote:
        _postgres(target.location, readonly=True).close()
    return target


def open_storage(
    location: str | os.PathLike[str] | Target,
    *,
    readonly: bool = False,
    sync: Sync = "full",
    busy_timeout_ms: int = 10_000,
) -> Storage:
    """The storage of the log at ``location``, not yet migrated or checked. ``sync`` and
    ``busy_timeout_ms`` are SQLite's; a SQLite file opened to write gets its folder made, one
    opened read-only must exist.

    Raises:
        NotALog: a read-only file that does not exist.
        InvalidArgument: a malformed URL, or PostgreSQL without its extra.
    """
    target = location if isinstance(location, Target) else parse_target(location)
    if target.remote:
        return _postgres(target.location, readonly=readonly)
    from engine.storage.durable import make_dirs
    from engine.storage.sqlite.storage import SqliteStorage

    path = target.location
    if readonly and not Path(path).is_file():
        raise NotALog(f"{path}: no such file")
    if not readonly:
        make_dirs(Path(path).parent)
    return SqliteStorage(path, sync, busy_timeout_ms, readonly=readonly)


def _postgres(url: str, *, readonly: bool) -> Storage:
    try:
        from engine.storage.postgres.storage import PostgresStorage
    except ImportError as ex:
        raise InvalidArgument(
            f"a PostgreSQL log needs the postgres extra: pip install 'foldline[postgres]' ({ex})"
        ) from ex
    return PostgresStorage(url, readonly=readonly)


__all__ = [
    "Backend",
    "CommandOutcome",
    "CommandRow",
    "EventRow",
    "HeadRow",
    "Migration",
    "Storage",
    "Sync",
    "Target",
    "Wakeups",
    "Writer",
    "WriterCapabilities",
    "check_target",
    "open_storage",
    "parse_target",
    "translated",
]
