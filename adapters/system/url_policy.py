"""Which URLs the server may call on a caller's behalf (push webhooks, ``url`` file parts).

A caller names the URL, the server makes the request: without a policy, any A2A caller could
make foldline call its own loopback services, the host's link-local neighbours or the cloud
metadata endpoint (whose credentials are the machine's). Only ``http`` and ``https`` are
called, and never an address in those ranges unless ``FOLDLINE_PUSH_ALLOW`` names it (a host
name, an address or a network, comma-separated: tests allow their loopback receiver).

A URL is judged twice: by its text when it is given (a literal address, ``localhost``), and by
every address its host resolves to just before each request (a name that points at a refused
address is refused then). What is left, and said in ADR 0039: a name whose answer changes
between the check and the connect.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def _literal(host: str) -> Address | None:
    """The address ``host`` spells, in any form the resolver takes as one (``127.1``,
    ``2130706433``, ``0x7f000001`` and the like, not only the dotted quad); None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


class UrlRefused(ValueError):
    """The URL may not be called; the message says why."""


class UrlPolicy:
    """``allow``: the host names, addresses and networks ``FOLDLINE_PUSH_ALLOW`` names."""

    def __init__(self, allow: Iterable[str] = ()) -> None:
        self.names: set[str] = set()
        self.networks: list[Network] = []
        for item in (a.strip() for a in allow):
            if not item:
                continue
            try:
                self.networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                self.names.add(item.lower().rstrip("."))

    @classmethod
    def parse(cls, text: str) -> UrlPolicy:
        return cls(text.split(","))

    def check(self, url: str) -> str:
        """The URL's host, once its text passes.

        Raises:
            UrlRefused: not http(s), no host, or a refused literal address or name.
        """
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 (a bad port raises here)
        except ValueError as ex:
            raise UrlRefused(f"{url!r} is not a URL: {ex}") from None
        if parts.scheme not in ("http", "https"):
            raise UrlRefused(f"{url!r}: only http and https URLs are called")
        host = (parts.hostname or "").lower().rstrip(".")
        if not host:
            raise UrlRefused(f"{url!r} names no host")
        if host in self.names:
            return host
        if host in LOOPBACK_NAMES:
            raise UrlRefused(f"{url!r} names this machine (loopback)")
        address = _literal(host)
        if address is None:
            return host  # a name: judged by what it resolves to, at each request
        self._judge(url, address)
        return host

    def check_resolved(self, url: str) -> None:
        """``check``, then every address the host resolves to now.

        Raises:
            UrlRefused: the text is refused, the name does not resolve, or an address is.
        """
        host = self.check(url)
        if host in self.names:
            return
        port = urlsplit(url).port or 443
        try:
            infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError, ValueError) as ex:  # a label too long is a UnicodeError
            raise UrlRefused(f"{url!r}: {host} does not resolve ({ex})") from None
        for info in infos:
            self._judge(url, ipaddress.ip_address(str(info[4][0]).split("%")[0]))

    def _judge(self, url: str, address: Address) -> None:
        if any(address in network for network in self.networks):
            return
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            self._judge(url, address.ipv4_mapped)
            return
        if address in METADATA:
            raise UrlRefused(f"{url!r} is a cloud metadata address")
        if address.is_loopback or address.is_unspecified:
            raise UrlRefused(f"{url!r} is a loopback address")
        if address.is_link_local:
            raise UrlRefused(f"{url!r} is a link-local address")
