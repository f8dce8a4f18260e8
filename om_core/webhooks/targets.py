"""Which webhook URLs the service may call.

Checked at registration (a 422 that says why) and again before every delivery run, because a name can be
pointed at another address after it was registered. Only `http` and `https`; every address the host
resolves to must be public: loopback, private, link-local, multicast, reserved, unspecified and shared
(CGNAT) addresses are refused unless the operator allows them (`OM_WEBHOOK_ALLOW_PRIVATE=true`, e.g. a
receiver on the same host). Redirects are never followed (`delivery.py`), so a public URL cannot bounce
the request inward.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from om_core.errors import OMError

Resolver = Callable[[str, int], Sequence[str]]

_CGNAT = ipaddress.ip_network("100.64.0.0/10")


class WebhookTargetRefused(OMError, ValueError):
    def __init__(self, detail: str) -> None:
        super().__init__("WEBHOOK_TARGET_REFUSED", detail)


def system_resolver(host: str, port: int) -> list[str]:
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)})


def _refusal(address: str) -> str | None:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    # The most specific reason first: Python counts several of these ranges as "private" too.
    for reason, hit in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("unspecified", ip.is_unspecified),
        ("shared (CGNAT)", isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
    ):
        if hit:
            return reason
    return None


def check_target(url: str, *, allow_private: bool, resolve: Resolver = system_resolver) -> str:
    """`url` if the service may call it, else `WebhookTargetRefused` saying what to change."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise WebhookTargetRefused(f"url must start with http:// or https:// (got scheme {parts.scheme!r})")
    if not parts.hostname:
        raise WebhookTargetRefused("url has no host: give a full URL such as https://example.com/om-events")
    if parts.username or parts.password:
        raise WebhookTargetRefused("url must not carry credentials; every request is signed instead")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise WebhookTargetRefused(f"url has an invalid port: {exc}") from exc
    if allow_private:
        return url
    try:
        addresses = resolve(parts.hostname, port)
    except OSError as exc:
        raise WebhookTargetRefused(f"the host {parts.hostname!r} does not resolve: {exc}") from exc
    if not addresses:
        raise WebhookTargetRefused(f"the host {parts.hostname!r} resolves to no address")
    for address in addresses:
        reason = _refusal(address)
        if reason is not None:
            raise WebhookTargetRefused(
                f"the host {parts.hostname!r} resolves to {address}, a {reason} address: webhooks go to "
                "public addresses only (an operator can allow private ones: OM_WEBHOOK_ALLOW_PRIVATE=true)"
            )
    return url
