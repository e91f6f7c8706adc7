"""The deployer's agent card (``FOLDLINE_AGENT_CARD``) on a real gunicorn: merged into the card
the official a2a-sdk client reads, with an ETag of its own; the extended card for the operator
token only; a bad file stops the boot with one line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.types import GetExtendedAgentCardRequest

from tests.support.cli import boot_refusal
from tests.support.server import OPERATOR_TOKEN, Server, serve

pytestmark = pytest.mark.server

CARD_PATH = "/.well-known/agent-card.json"
SKILL = {"id": "review", "name": "Review", "description": "Reviews a change", "tags": ["code"]}
CARD = {
    "name": "reviewer",
    "description": "Reviews changes",
    "provider": {"organization": "Example", "url": "https://example.com"},
    "documentationUrl": "https://example.com/docs",
    "iconUrl": "https://example.com/icon.png",
    "skills": [SKILL],
    "extended": {"skills": [SKILL, {**SKILL, "id": "merge", "name": "Merge"}]},
}


def _card(server: Server) -> tuple[str, dict[str, Any]]:
    status, headers, raw = server.request("GET", CARD_PATH)
    assert status == 200
    return {k.lower(): v for k, v in headers.items()}["etag"], json.loads(raw)


def _rpc(server: Server, method: str, token: str | None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {}}
    status, _, raw = server.request("POST", "/", body, headers=headers)
    assert status == 200 and b"Traceback" not in raw
    answer: dict[str, Any] = json.loads(raw)
    return answer


async def _extended_by_sdk(url: str) -> Any:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    client = await create_client(url, client_config=ClientConfig(httpx_client=http))
    try:
        return await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    finally:
        await client.close()
        await http.aclose()


def test_the_card_file_is_served_merged_and_the_extended_card_to_the_operator(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace) as plain:
        plain_etag, _ = _card(plain)
        none = _rpc(plain, "GetExtendedAgentCard", OPERATOR_TOKEN)
        assert none["error"]["code"] == -32007
    card_file = tmp_path / "card.json"
    card_file.write_text(json.dumps(CARD))
    with serve(workspace, {"FOLDLINE_AGENT_CARD": str(card_file)}) as server:
        etag, card = _card(server)
        parsed = parse_agent_card(card)
        assert parsed.name == "reviewer" and parsed.provider.organization == "Example"
        assert parsed.documentation_url == CARD["documentationUrl"]
        assert parsed.icon_url == CARD["iconUrl"]
        assert [s.id for s in parsed.skills] == ["review"]
        assert parsed.capabilities.push_notifications and parsed.capabilities.extended_agent_card
        assert etag != plain_etag
        status, _, _ = server.request("GET", CARD_PATH, headers={"If-None-Match": etag})
        assert status == 304

        extended = _rpc(server, "GetExtendedAgentCard", OPERATOR_TOKEN)["result"]
        assert [s["id"] for s in extended["skills"]] == ["review", "merge"]
        legacy = _rpc(server, "agent/getAuthenticatedExtendedCard", OPERATOR_TOKEN)["result"]
        assert legacy == extended
        for token in (None, "not-the-token"):
            error = _rpc(server, "GetExtendedAgentCard", token)["error"]
            (info,) = error["data"]
            assert error["code"] == -32000 and info["reason"] == "UNAUTHENTICATED"
            assert info["domain"] == "foldline" and info["metadata"] == {"code": "unauthorized"}
        by_sdk = asyncio.run(_extended_by_sdk(f"http://127.0.0.1:{server.port}"))
        assert [s.id for s in by_sdk.skills] == ["review", "merge"]


def test_a_bad_card_file_stops_the_boot_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "card.json"
    bad.write_text(json.dumps({"name": "x", "supportedInterfaces": []}))
    assert "supportedInterfaces" in boot_refusal(tmp_path / "ws", "FOLDLINE_AGENT_CARD", bad)
