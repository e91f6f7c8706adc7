"""Output contracts (ADR 0065): an agent's ``output_schema``, checked at boot, and a final
reply judged against it.

A schema is a JSON Schema, inline in the agents file or in a JSON file named relative to it;
it must be valid for the draft it names (``$schema``; 2020-12 when it names none). A reply is
valid when its text (surrounding whitespace aside) is one JSON document the schema accepts.
The verdict is recorded in the job's finish, so a replay never validates again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from adapters.settings.config_error import ConfigError

MAX_ERRORS = 20  # kept per reply: enough to fix it, bounded like every recorded field
MAX_ERROR_CHARS = 500


def load_schema(where: str, raw: str | dict[str, Any], agents_file: Path) -> dict[str, Any]:
    """The schema ``raw`` names (a path, relative to ``agents_file``'s directory) or is.

    Raises:
        ConfigError: one line naming ``where``: the file is unreadable or not JSON, or the
            schema is not a valid JSON Schema.
    """
    if isinstance(raw, str):
        path = agents_file.parent / raw
        try:
            loaded = json.loads(path.read_text())
        except OSError as ex:
            raise ConfigError(f"{where}: {path} cannot be read ({ex.strerror or ex})") from None
        except (ValueError, UnicodeDecodeError) as ex:
            raise ConfigError(f"{where}: {path} is not JSON ({ex})") from None
    else:
        loaded = raw
    if not isinstance(loaded, dict):
        raise ConfigError(f"{where}: a JSON Schema is an object, got {type(loaded).__name__}")
    try:
        validator = jsonschema.validators.validator_for(loaded, jsonschema.Draft202012Validator)
        validator.check_schema(loaded)
    except jsonschema.exceptions.SchemaError as ex:
        at = "/".join(str(p) for p in ex.absolute_path) or "(root)"
        raise ConfigError(f"{where}: not a valid JSON Schema at {at}: {ex.message}") from None
    return loaded


@dataclass(frozen=True)
class Verdict:
    """A reply judged against a contract: ``data`` is the parsed reply when it is valid."""

    valid: bool
    errors: tuple[str, ...] = ()
    data: Any = None


def judge(schema: dict[str, Any], reply: str) -> Verdict:
    """Whether ``reply`` is one JSON document ``schema`` accepts, and if not, why (at most
    ``MAX_ERRORS`` messages, each ``<json path>: <message>``, in document order)."""
    try:
        data = json.loads(reply)
    except ValueError as ex:
        return Verdict(False, (f"the reply is not JSON: {ex}"[:MAX_ERROR_CHARS],))
    validator = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    found = sorted(validator(schema).iter_errors(data), key=lambda e: list(map(str, e.path)))
    if not found:
        return Verdict(True, (), data)
    errors = tuple(
        f"{error.json_path}: {error.message}"[:MAX_ERROR_CHARS] for error in found[:MAX_ERRORS]
    )
    return Verdict(False, errors)
