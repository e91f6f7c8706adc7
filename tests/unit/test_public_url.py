"""What ``FOLDLINE_PUBLIC_URL`` says about reaching this server: the file route's base (none
without one, none on AgentCore's invoke URL)."""

from __future__ import annotations

import pytest

from adapters.public_url import file_route_base

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
