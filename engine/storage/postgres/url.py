"""A PostgreSQL log's address: the ``postgresql://`` URL, its schema, its channel.

Kept apart from the backend proper so that parsing and showing a URL never imports psycopg:
the selector (``engine.storage``) and the error messages of a SQLite-only install use it.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from engine.errors import InvalidArgument

SCHEMES = ("postgresql", "postgres")
DEFAULT_SCHEMA = "foldline"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def split_url(url: str) -> tuple[str, str]:
    """``(conninfo, schema)`` of a ``postgresql://`` URL with an optional ``schema=``.

    Raises:
        InvalidArgument: not a PostgreSQL URL, or a schema name that is not a plain identifier.
    """
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise InvalidArgument(f"not a PostgreSQL URL: {redact(url)}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    schema = schemas[-1] if schemas else DEFAULT_SCHEMA
    if not _SCHEMA_NAME.match(schema):
        raise InvalidArgument(
            f"schema must be a lower-case identifier (a-z, 0-9, _; at most 63), got {schema!r}"
        )
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def redact(url: str) -> str:
    """The URL without its password, for messages and ``Storage.path``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def channel(schema: str) -> str:
    """The ``LISTEN``/``NOTIFY`` channel of the log in ``schema``."""
    return f"foldline_{schema}"


__all__ = ["DEFAULT_SCHEMA", "SCHEMES", "channel", "redact", "split_url"]
