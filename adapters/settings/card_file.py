"""``FOLDLINE_AGENT_CARD``: the deployer's agent card, a JSON object merged over foldline's.

```json
{
  "name": "reviewer",
  "description": "Reviews a change and answers with findings",
  "version": "2.1.0",
  "provider": {"organization": "Example", "url": "https://example.com"},
  "documentationUrl": "https://example.com/docs",
  "iconUrl": "https://example.com/icon.png",
  "defaultInputModes": ["text/plain"],
  "defaultOutputModes": ["text/plain", "image/png"],
  "skills": [{"id": "review", "name": "Review", "description": "...", "tags": ["code"],
              "examples": ["review my branch"]}],
  "extended": {"skills": [...]}
}
```

Every key is optional and replaces foldline's value whole (a list of skills replaces the
default skill). ``extended``, an object of the same keys, is merged over the public card to
make the extended card (``GetExtendedAgentCard``, operator token only). The transport stays
foldline's: interfaces, URLs and capabilities are not the deployer's to set. Read once, at
boot: an unknown key, a wrong type or a bad URL is a ``ConfigError`` naming the file and the
key, so the server does not start on a card it would misdescribe itself with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType

from adapters.settings.config_error import ConfigError

Text = Annotated[str, Meta(min_length=1, max_length=2000)]
Url = Annotated[str, Meta(pattern=r"^https?://\S+$", max_length=2000)]
Modes = Annotated[list[Annotated[str, Meta(pattern=r"^\S+/\S+$")]], Meta(max_length=50)]


class _Strict(
    msgspec.Struct, forbid_unknown_fields=True, kw_only=True, rename="camel", omit_defaults=True
):
    pass


class Skill(_Strict):
    id: Text
    name: Text
    description: Text
    tags: Annotated[list[Text], Meta(max_length=50)]
    examples: list[Text] | UnsetType = UNSET
    input_modes: Modes | UnsetType = UNSET
    output_modes: Modes | UnsetType = UNSET


class Provider(_Strict):
    organization: Text
    url: Url


class CardFields(_Strict):
    """The fields a deployer may set, each replacing foldline's whole."""

    name: Text | UnsetType = UNSET
    description: Text | UnsetType = UNSET
    version: Text | UnsetType = UNSET
    provider: Provider | UnsetType = UNSET
    documentation_url: Url | UnsetType = UNSET
    icon_url: Url | UnsetType = UNSET
    default_input_modes: Modes | UnsetType = UNSET
    default_output_modes: Modes | UnsetType = UNSET
    skills: Annotated[list[Skill], Meta(min_length=1, max_length=100)] | UnsetType = UNSET


class CardFile(CardFields):
    extended: CardFields | UnsetType = UNSET


@dataclass(frozen=True)
class DeployerCard:
    """What the file says: the fields over the public card, and over that the extended card's
    (None: no extended card is configured)."""

    public: Mapping[str, Any] = field(default_factory=dict)
    extended: Mapping[str, Any] | None = None


def load_card(path: str) -> DeployerCard:
    """Read and check ``path``.

    Raises:
        ConfigError: the file is missing, not JSON, or has an unknown key, a wrong type or a
            bad value (the message names the key).
    """
    where = f"FOLDLINE_AGENT_CARD {path}"
    try:
        raw = Path(path).read_bytes()
    except OSError as ex:
        raise ConfigError(f"{where}: cannot be read ({ex.strerror or ex})") from None
    try:
        parsed = msgspec.json.decode(raw, type=CardFile)
    except msgspec.ValidationError as ex:
        raise ConfigError(f"{where}: {ex}".replace("\n", " ")) from None
    except msgspec.DecodeError as ex:
        raise ConfigError(f"{where}: not a JSON object ({ex})".replace("\n", " ")) from None
    fields: dict[str, Any] = msgspec.to_builtins(parsed)
    extended = fields.pop("extended", None)
    return DeployerCard(public=fields, extended=extended)
