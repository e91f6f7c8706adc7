"""What ``FOLDLINE_PUBLIC_URL`` says about reaching this server: the file route's base (none
without one, none on AgentCore's invoke URL) and the boot's warning (unset on a bind others
reach; a loopback server is quiet)."""

from __future__ import annotations

import pytest

from adapters.settings.public_url import file_route_base, is_loopback_bind, origin_warning

INVOKE = (
    "https://bedrock-agentcore.us-east-1.amazonaws.com/runtimes/"
    "arn%3Aaws%3Abedrock-agentcore%3Aus-east-1%3A123456789012%3Aruntime%2Fagent-x/invocations"
)


@pytest.mark.parametrize(
    ("public_url", "base"),
    [
        (None, None),
        ("", None),
        ("https://agent.example", "https://agent.example/"),
        ("https://agent.example/a2a/", "https://agent.example/a2a/"),
        (INVOKE, None),
        (INVOKE + "/", None),
        # A VPC endpoint's own host: the invoke path says what it is.
        ("https://vpce-1.bedrock-agentcore.example.internal/runtimes/x/invocations", None),
        ("https://bedrock-agentcore-fips.us-east-1.amazonaws.com/", None),
    ],
)
def test_file_route_base_only_on_a_public_url_that_serves_every_path(
    public_url: str | None, base: str | None
) -> None:
    assert file_route_base(public_url) == base


@pytest.mark.parametrize(
    ("bind", "loopback"),
    [
        ("127.0.0.1:8080", True),
        ("127.0.0.2:8080", True),
        ("localhost:8080", True),
        ("[::1]:8080", True),
        ("0.0.0.0:8080", False),
        ("[::]:9000", False),
        ("10.0.0.5:9000", False),
        ("agent.internal:9000", False),
    ],
)
def test_is_loopback_bind(bind: str, loopback: bool) -> None:
    assert is_loopback_bind(bind) is loopback


def test_origin_warning_when_the_card_would_name_the_containers_own_origin() -> None:
    warning = origin_warning(None, "0.0.0.0:9000")
    assert warning is not None and "\n" not in warning
    assert warning.startswith("foldline: warning: FOLDLINE_PUBLIC_URL is unset")
    assert "0.0.0.0:9000" in warning
    assert origin_warning(None, "127.0.0.1:8080") is None  # a developer's own server
    assert origin_warning(INVOKE, "0.0.0.0:9000") is None  # the card names the invoke URL
    assert origin_warning("https://agent.example", "[::]:8080") is None
