"""What ``FOLDLINE_PUBLIC_URL`` says about how callers reach this server from outside: whether
its result files can be offered as URLs of the file route, and the boot's warning when the agent
card would name the container's own origin.

AgentCore forwards only its protocol's paths to the container (``/invocations``, ``/ping``; for
A2A ``POST /`` and the card), so the file route (``GET /a2a/tasks/{id}/files/{n}``) is reachable
only through a public URL the deployer exposes the whole server on. AgentCore's own invoke URL
(``https://bedrock-agentcore.<region>.amazonaws.com/runtimes/<ARN>/invocations``), which the
deploy guide sets so the card names it, is not one: it forwards ``POST /`` and nothing else.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

# AgentCore's data-plane invoke path, whatever the endpoint's host (regional, FIPS, a VPC
# endpoint's own name): it forwards the protocol's request, never another path.
_INVOKE_PATH = re.compile(r"/runtimes/[^/]+/invocations/?")


def is_loopback_bind(bind: str) -> bool:
    """Whether ``bind`` (``HOST:PORT``) listens on a loopback address only (``localhost``,
    ``127.0.0.0/8``, ``[::1]``): a server only this machine reaches, by its own origin."""
    host = bind.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost: reachable from elsewhere
        return False


def is_agentcore_invoke_url(url: str) -> bool:
    """Whether ``url`` is an AgentCore runtime's invoke URL (its path ``/runtimes/<ARN>/
    invocations``, or a ``bedrock-agentcore`` host of ``amazonaws.com``): one that forwards the
    protocol's requests only."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    agentcore_host = host.startswith("bedrock-agentcore") and (
        host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn")
    )
    return agentcore_host or _INVOKE_PATH.fullmatch(parts.path) is not None


def file_route_base(public_url: str | None) -> str | None:
    """The base (ending in ``/``) on which a caller reaches the file route, or None when no
    caller can be relied on to: no ``FOLDLINE_PUBLIC_URL``, or one that is AgentCore's invoke
    URL. Result files then travel inline only (``adapters.http.a2a.result_files``)."""
    if not public_url or is_agentcore_invoke_url(public_url):
        return None
    return public_url.rstrip("/") + "/"


def origin_warning(public_url: str | None, bind: str) -> str | None:
    """The boot's one-line warning when the agent card's URL would be whatever origin a request
    arrives on, which behind a platform is the container's own: ``FOLDLINE_PUBLIC_URL`` unset
    on a bind other callers reach. None otherwise; a loopback server (a developer's) is quiet,
    its own origin being the one its callers use."""
    if public_url or is_loopback_bind(bind):
        return None
    return (
        f"foldline: warning: FOLDLINE_PUBLIC_URL is unset and {bind} is not a loopback bind:"
        " the A2A agent card names the origin each request arrives on (behind a platform such"
        " as AgentCore, the container's own, which callers cannot reach), and result files go"
        " inline only, never as URLs; set FOLDLINE_PUBLIC_URL to the URL callers use"
    )
