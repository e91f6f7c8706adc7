"""The A2A agent card (design.md §5.2): what this endpoint says it is, served without the lease."""

from __future__ import annotations

import hashlib
from typing import Any

import falcon

from adapters.http import media
from adapters.runtime import Runtime


def agent_card(base_url: str) -> dict[str, Any]:
    """A dual card: a 1.0 and a 0.3 interface on the same URL (the 1.0 client picks 1.0), and
    the legacy top-level fields a 0.3 client reads (design.md §13.4)."""
    description = "foldline: runs each message through the configured agent command"
    return {
        "name": "foldline",
        "description": description,
        "supportedInterfaces": [
            {"url": base_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": base_url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "version": "0.1.0",
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "run", "name": "run", "description": description, "tags": ["agent"]}],
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3",
        "url": base_url,
    }


CARD_CACHE_CONTROL = "private, max-age=300"


def interface_url(public_url: str | None, prefix: str) -> str:
    """The URL the card advertises: ``FOLDLINE_PUBLIC_URL`` (else this request's origin) with
    the one trailing ``/`` the source system appends."""
    return (public_url or prefix).rstrip("/") + "/"


def card_etag(card: dict[str, Any]) -> str:
    """A weak ETag, the sha256 of the card's canonical JSON: it changes whenever the card
    does (a new public URL, a new version), and only then."""
    return f'W/"{hashlib.sha256(media.encode_canonical(card)).hexdigest()}"'


def _matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 weak comparison of ``If-None-Match`` (a list, or ``*``) with ``etag``."""
    if not if_none_match:
        return False
    opaque = etag.removeprefix("W/")
    candidates = (tag.strip() for tag in if_none_match.split(","))
    return any(tag == "*" or tag.removeprefix("W/") == opaque for tag in candidates)


class AgentCard:
    """Served without the lease: a plain description of this endpoint, cacheable for five
    minutes as the source system serves it, and answered 304 when the caller's copy is
    current."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        card = agent_card(interface_url(self.runtime.config.public_url, req.prefix))
        etag = card_etag(card)
        resp.set_header("ETag", etag)
        resp.cache_control = [CARD_CACHE_CONTROL]
        if _matches(req.get_header("If-None-Match"), etag):
            resp.status = falcon.HTTP_304
            return
        resp.media = card
