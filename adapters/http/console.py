"""The operator console: its static pages and the JSON they need beyond ``/v1``.

Reads only, no lease. The pages are package data (``adapters/http/console_pages/``), served with a
strict ``Content-Security-Policy``: scripts and styles from this origin only, no inline code,
requests to this origin only. The pages themselves are open; their JSON (``/console/api/``) is the
operator's, like the whole log it shows, and the page sends the bearer token it asked for
(never in a URL). Controls go through ``/v1`` as they are (If-Match, bearer token). The
queries live in ``projections.console_queries``.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import falcon
import msgspec

from adapters.http.errors import ApiError
from adapters.http.ports import ReadRuntime
from engine.audit import export_line
from projections import console_queries as q

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


def asset_names() -> list[str]:
    """The files the console serves: every page asset shipped in ``adapters/http/console_pages``."""
    root = resources.files("adapters.http") / "console_pages"
    return sorted(p.name for p in root.iterdir() if p.name.endswith(tuple(_TYPES)))


def _secure(resp: falcon.Response) -> None:
    resp.set_header("Content-Security-Policy", CSP)
    resp.set_header("X-Content-Type-Options", "nosniff")
    resp.set_header("Referrer-Policy", "no-referrer")
    resp.set_header("Cache-Control", "no-cache")


def _json(resp: falcon.Response, value: Any) -> None:
    _secure(resp)
    resp.content_type = falcon.MEDIA_JSON
    resp.data = msgspec.json.encode(value)


def _int(req: falcon.Request, name: str, default: int | None) -> int | None:
    raw = req.get_param(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or len(raw) > 18:
        raise ApiError(falcon.HTTP_400, "invalid_argument", f"{name} must be a whole number")
    return int(raw)


class Assets:
    """``/console/`` is the page; ``/console/{name}`` its scripts and styles; nothing else."""

    def __init__(self) -> None:
        root = resources.files("adapters.http") / "console_pages"
        self.files = {name: (root / name).read_bytes() for name in asset_names()}

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str = "index.html") -> None:
        body = self.files.get(name)
        if body is None:
            raise ApiError(falcon.HTTP_404, "not_found", f"no console file {name!r}")
        _secure(resp)
        resp.content_type = _TYPES[name[name.rindex(".") :]]
        resp.data = body


class ToSlash:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        raise falcon.HTTPMovedPermanently("/console/")


class Reads:
    def __init__(self, runtime: ReadRuntime, read_only: bool) -> None:
        self.runtime = runtime
        self.read_only = read_only


class OverviewApi(Reads):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        found = self.runtime.reads.overview()
        _json(
            resp,
            {
                **msgspec.to_builtins(found),
                "read_only": self.read_only,
                # Every server asks for a token; the read-only console is open on loopback.
                "token_required": not self.read_only,
            },
        )


class ListApi(Reads):
    def on_get(self, req: falcon.Request, resp: falcon.Response, table: str) -> None:
        filters = q.Filters(
            state=req.get_param("state") or None,
            session=req.get_param("session") or None,
            agent=req.get_param("agent") or None,
            prefix=req.get_param("prefix") or None,
        )
        limit = _int(req, "limit", 50)
        page = self.runtime.reads.list_entities(table, filters, req.get_param("after"), limit or 0)
        _json(resp, page)


class EntityApi(Reads):
    def on_get(self, req: falcon.Request, resp: falcon.Response, kind: str, entity_id: str) -> None:
        found = self.runtime.reads.entity(kind, entity_id)
        if found is None:
            raise ApiError(falcon.HTTP_404, "not_found", f"{kind} {entity_id!r} does not exist")
        _json(resp, found)


class LogApi(Reads):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        kinds = [k for k in (req.get_param("kind") or "").split(",") if k]
        page = self.runtime.reads.log_page(
            _int(req, "before", None),
            kinds,
            req.get_param("type") or None,
            _int(req, "limit", 100) or 0,
        )
        _json(resp, page)


class ExportApi(Reads):
    """A range of the log as canonical JSON lines (``foldline export``'s format), as a file."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        first = _int(req, "from", 1) or 0
        last = _int(req, "to", None)
        if last is None:
            raise ApiError(falcon.HTTP_400, "invalid_argument", "to is required")
        rows = self.runtime.reads.export_rows(first, last)
        _secure(resp)
        resp.content_type = "application/x-ndjson"
        resp.set_header(
            "Content-Disposition", f'attachment; filename="foldline-{first}-{last}.jsonl"'
        )
        resp.stream = (export_line(row) + b"\n" for row in rows)
