"""The A2A agent card (design.md §5.2): what this endpoint says it is, served without the lease;
the deployer's fields (``FOLDLINE_AGENT_CARD``, ``adapters.settings.card_file``) merged over
foldline's, and the extended card ``GetExtendedAgentCard`` gives the operator."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

import falcon

from adapters.http import media
from adapters.http.errors import EXTENDED_CARD_NOT_CONFIGURED, UNAUTHENTICATED, RpcError
from adapters.http.ports import ServerRuntime
from adapters.settings.card_file import DeployerCard


def agent_card(
    base_url: str, deployer: DeployerCard | None = None, *, extended: bool = False
) -> dict[str, Any]:
    """A dual card: a 1.0 and a 0.3 interface on the same URL (the 1.0 client picks 1.0), and
    the legacy top-level fields a 0.3 client reads (design.md §13.4). The ``deployer``'s
    fields replace foldline's (and, for the ``extended`` card, its extended fields those);
    the interfaces, URLs and capabilities stay foldline's."""
    card = _defaults(base_url)
    if deployer is None:
        return card
    card.update(deployer.public)
    if deployer.extended is not None:
        card["capabilities"]["extendedAgentCard"] = True
        card["supportsAuthenticatedExtendedCard"] = True  # 0.3's name of the same
        if extended:
            card.update(deployer.extended)
    return card


def _defaults(base_url: str) -> dict[str, Any]:
    description = "foldline: runs each message through the configured agent command"
    return {
        "name": "foldline",
        "description": description,
        "supportedInterfaces": [
            {"url": base_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": base_url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "version": "0.1.0",
        "capabilities": {"streaming": True, "pushNotifications": True},
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

    def __init__(self, runtime: ServerRuntime) -> None:
        self.runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        config = self.runtime.config
        card = agent_card(interface_url(config.public_url, req.prefix), config.agent_card)
        etag = card_etag(card)
        resp.set_header("ETag", etag)
        resp.cache_control = [CARD_CACHE_CONTROL]
        if _matches(req.get_header("If-None-Match"), etag):
            resp.status = falcon.HTTP_304
            return
        resp.media = card


def _holds_operator_token(runtime: ServerRuntime, authorization: str | None) -> bool:
    """Whether ``authorization`` is ``Bearer <operator token>`` (constant-time compare)."""
    scheme, _, value = (authorization or "").partition(" ")
    operator = runtime.operator_token.current()
    if scheme.lower() != "bearer" or not value.strip() or operator is None:
        return False
    return hmac.compare_digest(value.strip().encode(), operator.encode())


def extended_card(runtime: ServerRuntime, req: falcon.Request) -> Mapping[str, Any]:
    """``GetExtendedAgentCard``: the extended card, for the operator token only.

    Raises:
        RpcError: ``EXTENDED_CARD_NOT_CONFIGURED`` (-32007) when ``FOLDLINE_AGENT_CARD`` has no
            ``extended`` object; ``UNAUTHENTICATED`` when the caller does not present the
            operator token as ``Authorization: Bearer``.
    """
    deployer = runtime.config.agent_card
    if deployer is None or deployer.extended is None:
        raise RpcError(EXTENDED_CARD_NOT_CONFIGURED, "no extended agent card is configured")
    if not _holds_operator_token(runtime, req.get_header("Authorization")):
        raise RpcError(
            UNAUTHENTICATED,
            "the extended agent card needs the operator token (Authorization: Bearer)",
            {"code": "unauthorized"},
        )
    base_url = interface_url(runtime.config.public_url, req.prefix)
    return agent_card(base_url, deployer, extended=True)
