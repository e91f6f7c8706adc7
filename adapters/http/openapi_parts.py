"""The pieces every OpenAPI path item is built from (``adapters.http.openapi``): a schema's
``$ref``, a JSON answer, the error answers by status, a parameter."""

from __future__ import annotations

from typing import Any

from adapters.http import schemas as s

REF = "#/components/schemas/{name}"
ERRORS = {
    "400": "bad input",
    "401": "no bearer token, or one nobody holds (the operator's, or a live run's)",
    "403": (
        "a run token outside its scope: another session's job, stream, task or result, a job"
        " it is no ancestor of (results, channel controls), or what only the operator may"
        " (the whole log, leases, session and job controls)"
    ),
    "404": "unknown",
    "409": "invalid transition or conflict",
    "412": "If-Match version mismatch",
    "413": "too large",
    "415": "not JSON",
    "429": "admission refused",
    "503": "another server holds the workspace, or a storage fault (Retry-After when it passes)",
    "507": "the disk is full: storage_full, nothing recorded (Retry-After: 5)",
}


def ref(cls: type) -> dict[str, str]:
    return {"$ref": REF.format(name=cls.__name__)}


def json_body(cls: type, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref(cls)}}}


def error_bodies(*codes: str) -> dict[str, Any]:
    return {code: json_body(s.ErrorOut, ERRORS[code]) for code in codes}


def param(
    name: str, where: str = "query", required: bool = False, schema: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "schema": schema or {"type": "string"}}


def _text(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/plain": {"schema": {"type": "string"}}}}


def _proof(description: str) -> dict[str, Any]:
    schema = {"type": "object", "description": "the JSON `foldline prove` prints"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def proof_paths() -> dict[str, Any]:
    """``/v1/checkpoint`` and ``/v1/proofs/...``: open, no token (ADR 0040)."""
    size = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
    return {
        "/v1/checkpoint": {
            "get": {
                "operationId": "checkpoint",
                "summary": "The latest signed checkpoint (a C2SP signed note); open",
                "responses": {
                    "200": _text("the signed note"),
                    **error_bodies("404"),
                },
            }
        },
        "/v1/proofs/inclusion": {
            "get": {
                "operationId": "inclusion_proof",
                "summary": "The event at position is in the tree of size; open",
                "parameters": [
                    param("position", required=True, schema=size),
                    param("size", schema=size),
                ],
                "responses": {"200": _proof("the proof"), **error_bodies("400", "404")},
            }
        },
        "/v1/proofs/consistency": {
            "get": {
                "operationId": "consistency_proof",
                "summary": "The tree of new extends the tree of old; open",
                "parameters": [param("old", required=True, schema=size), param("new", schema=size)],
                "responses": {"200": _proof("the proof"), **error_bodies("400", "404")},
            }
        },
    }
