"""``FOLDLINE_AGENT_CARD``: the deployer's card, checked at boot and merged over foldline's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from a2a.client.card_resolver import parse_agent_card

from adapters.http.a2a.card import agent_card, card_etag
from adapters.settings.card_file import load_card
from adapters.settings.config import ConfigError, load_config

URL = "http://agent.example/"
SKILL = {"id": "review", "name": "Review", "description": "Reviews a change", "tags": ["code"]}
CARD = {
    "name": "reviewer",
    "description": "Reviews changes",
    "version": "2.1.0",
    "provider": {"organization": "Example", "url": "https://example.com"},
    "documentationUrl": "https://example.com/docs",
    "iconUrl": "https://example.com/icon.png",
    "defaultOutputModes": ["text/plain", "image/png"],
    "skills": [{**SKILL, "examples": ["review my branch"]}],
    "extended": {"skills": [SKILL, {**SKILL, "id": "merge", "name": "Merge"}]},
}


def _file(tmp_path: Path, content: Any) -> str:
    path = tmp_path / "card.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_card_file_fields_replace_the_defaults_and_leave_the_transport(tmp_path: Path) -> None:
    deployer = load_card(_file(tmp_path, CARD))
    card = agent_card(URL, deployer)
    assert card["name"] == "reviewer" and card["version"] == "2.1.0"
    assert card["provider"] == CARD["provider"] and card["iconUrl"] == CARD["iconUrl"]
    assert card["documentationUrl"] == CARD["documentationUrl"]
    assert card["skills"] == CARD["skills"] and card["defaultInputModes"] == ["text/plain"]
    assert card["supportedInterfaces"] == agent_card(URL)["supportedInterfaces"]
    assert card["capabilities"] == {
        "streaming": True,
        "pushNotifications": True,
        "extendedAgentCard": True,
    }
    assert card["supportsAuthenticatedExtendedCard"] is True
    parsed = parse_agent_card(card)  # the official client reads it
    assert parsed.name == "reviewer" and parsed.capabilities.extended_agent_card
    assert parsed.skills[0].examples == ["review my branch"]
    extended = agent_card(URL, deployer, extended=True)
    assert [s["id"] for s in extended["skills"]] == ["review", "merge"]
    assert extended["name"] == "reviewer"  # the public card's, where extended says nothing
    assert card_etag(card) != card_etag(agent_card(URL))


def test_card_file_without_extended_advertises_no_extended_card(tmp_path: Path) -> None:
    card = agent_card(URL, load_card(_file(tmp_path, {"name": "plain"})))
    assert card["name"] == "plain"
    assert "extendedAgentCard" not in card["capabilities"]
    assert "supportsAuthenticatedExtendedCard" not in card
    assert "extendedAgentCard" not in agent_card(URL)["capabilities"]


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ({"name": "x", "url": "http://evil/"}, "url"),
        ({"capabilities": {"streaming": False}}, "capabilities"),
        ({"name": 3}, "$.name"),
        ({"skills": [{"id": "a", "name": "a", "description": "a"}]}, "tags"),
        ({"skills": [{**SKILL, "colour": "red"}]}, "colour"),
        ({"provider": {"organization": "E", "url": "ftp://e"}}, "$.provider.url"),
        ({"iconUrl": "javascript:alert(1)"}, "iconUrl"),
        ({"extended": {"supportedInterfaces": []}}, "supportedInterfaces"),
        ({"skills": []}, "skills"),
        ("[1, 2]", "object"),
        ("{not json", "not a JSON object"),
    ],
)
def test_a_bad_card_file_is_a_one_line_config_error_naming_the_key(
    tmp_path: Path, content: Any, named: str
) -> None:
    path = _file(tmp_path, content)
    with pytest.raises(ConfigError) as caught:
        load_config({"FOLDLINE_AGENT_CARD": path}, workspace=str(tmp_path))
    message = str(caught.value)
    assert "\n" not in message and f"FOLDLINE_AGENT_CARD {path}" in message and named in message


def test_a_missing_card_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_card(str(tmp_path / "nowhere.json"))
