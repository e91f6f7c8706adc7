"""Which URLs the server calls for a caller (issue 30, ADR 0039): http(s) only, never this
machine, its link-local neighbours or the cloud metadata, however the address is spelled,
unless ``FOLDLINE_PUSH_ALLOW`` names it."""

from __future__ import annotations

import pytest

from adapters.system.url_policy import UrlPolicy, UrlRefused

REFUSED = [
    "file:///etc/passwd",
    "ftp://example.org/x",
    "http:///nohost",
    "http://localhost:8080/",
    "http://LOCALHOST./",
    "http://127.0.0.1/",
    "http://127.1/",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0177.0.0.1/",
    "http://0/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://evil.example@127.0.0.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/",
    "http://169.254.1.1/",
    "http://[fe80::1]/",
    "http://host:99999/",
]


@pytest.mark.parametrize("url", REFUSED)
def test_url_policy_refuses(url: str) -> None:
    with pytest.raises(UrlRefused):
        UrlPolicy().check(url)


def test_url_policy_lets_public_addresses_and_allowed_ones_through() -> None:
    assert UrlPolicy().check("https://example.org:8443/hook") == "example.org"
    assert UrlPolicy().check("http://10.0.0.7/hook") == "10.0.0.7"  # a private net: a VPC's
    allowed = UrlPolicy.parse("127.0.0.1, receiver.local")
    assert allowed.check("http://127.0.0.1:9/hook") == "127.0.0.1"
    assert allowed.check("http://receiver.local/") == "receiver.local"
    with pytest.raises(UrlRefused):
        allowed.check("http://127.0.0.2/")


def test_url_policy_judges_a_name_by_what_it_resolves_to() -> None:
    with pytest.raises(UrlRefused, match="loopback"):
        UrlPolicy().check_resolved("http://localhost.localdomain./")
    with pytest.raises(UrlRefused, match="does not resolve"):
        UrlPolicy().check_resolved("http://" + "a" * 70 + ".invalid/")
    UrlPolicy(["127.0.0.0/8"]).check_resolved("http://127.0.0.1:1/")
