"""The paging parameters of ``/v1``'s lists and streams: ``limit`` and ``after``.

An empty ``after=`` is refused like an empty ``limit=`` (the document says no cursor is
empty): it is never read as the first page.
"""

from __future__ import annotations

import falcon

from adapters.http.errors import ApiError

MAX_LIMIT = 500


def limit(req: falcon.Request, default: int = 100, maximum: int = MAX_LIMIT) -> int:
    raw = req.get_param("limit")
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= maximum:
        raise ApiError(falcon.HTTP_400, "invalid_argument", f"limit must be 1..{maximum}")
    return int(raw)


def after_position(req: falcon.Request) -> int:
    raw = req.get_param("after")
    if raw is None:  # an empty ``after=`` is a bad position, not an absent one
        raw = req.get_header("Last-Event-ID") or "0"
    if not raw.isdigit():
        raise ApiError(falcon.HTTP_400, "invalid_argument", "after must be a log position")
    return int(raw)


def after_id(req: falcon.Request) -> str | None:
    """A page's ``after`` cursor (an id), or None for the first page.

    Raises:
        ApiError: 400, an empty ``after=``, which the document says no cursor is (it was
            read as the first page while an empty ``limit=`` was refused).
    """
    raw = req.get_param("after")
    if raw == "":
        raise ApiError(falcon.HTTP_400, "invalid_argument", "after must be a page's next cursor")
    return raw
