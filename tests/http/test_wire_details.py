"""Wire details a caller of the source system relies on, on a real gunicorn: the agent card's
caching (ETag, Cache-Control, 304), its interface URL, and the unknown-path answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.server import Server, serve

pytestmark = pytest.mark.server

CARD = "/.well-known/agent-card.json"


def get_card(server: Server, **headers: str) -> tuple[int, dict[str, str], bytes]:
    """The card GET, with header names lowercased (the wire's case is the server's choice)."""
    status, answer, raw = server.request("GET", CARD, headers=headers)
    return status, {name.lower(): value for name, value in answer.items()}, raw


def test_card_is_cacheable_and_answers_304_to_a_current_etag(tmp_path: Path) -> None:
    with serve(tmp_path, {"FOLDLINE_PUBLIC_URL": "http://agent.example:9000"}) as server:
        status, headers, raw = get_card(server)
        etag = headers["etag"]
        again = get_card(server, **{"If-None-Match": etag})
        listed = get_card(server, **{"If-None-Match": f'"other", {etag}'})
        stale = get_card(server, **{"If-None-Match": 'W/"other"'})
    assert status == 200 and headers["cache-control"] == "private, max-age=300"
    assert etag.startswith('W/"') and etag.endswith('"')
    card = json.loads(raw)
    assert card["supportedInterfaces"][0]["url"] == "http://agent.example:9000/"
    assert again[0] == 304 and again[2] == b"" and again[1]["etag"] == etag
    assert listed[0] == 304
    assert stale[0] == 200 and json.loads(stale[2]) == card


def test_card_etag_changes_when_the_card_does(tmp_path: Path) -> None:
    etags: list[str] = []
    urls, revalidated = [], []
    for public in ("http://one.example/", "http://two.example"):
        with serve(tmp_path, {"FOLDLINE_PUBLIC_URL": public}) as server:
            _, headers, raw = get_card(server)
            if etags:  # the first card's tag, shown to the second server
                revalidated.append(get_card(server, **{"If-None-Match": etags[0]})[0])
        etags.append(headers["etag"])
        urls.append(json.loads(raw)["supportedInterfaces"][0]["url"])
    assert urls == ["http://one.example/", "http://two.example/"]
    assert etags[0] != etags[1] and revalidated == [200]


def test_unknown_path_answers_not_found(tmp_path: Path) -> None:
    answers = []
    with serve(tmp_path) as server:
        for path in ("/nope", "/v2/jobs", "/invocations/extra"):
            for method, body in (("GET", None), ("POST", {"prompt": "x"})):
                status, headers, raw = server.request(method, path, body)
                kind = {k.lower(): v for k, v in headers.items()}["content-type"]
                answers.append((status, kind.split(";")[0], json.loads(raw)))
    assert answers == [(404, "application/json", {"error": "not found"})] * 6
