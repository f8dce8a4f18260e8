"""Which webhook URLs the service may call, and the one address a delivery run connects to.

A name is resolved once, every address it resolves to is checked (`addresses.refusal`: one non-public
address is enough to refuse the URL), and the connection then goes to an address that passed: the
`Target` carries it, and `pinned.py` makes the request to it with the URL's host kept in the `Host`
header, the TLS SNI and the certificate check. Nothing resolves the name again between the check and the
connection, so a name re-pointed (DNS rebinding, a TTL of 0) after the check changes nothing.

The same check runs when a URL is registered (a 422 that says why) and at the start of every delivery
run, because a name can be pointed at another address after it was registered. Only `http` and `https`;
no credentials in the URL. Redirects are never followed (`pinned.py`), so a public URL cannot bounce the
request inward. The operator may allow non-public addresses (`OM_WEBHOOK_ALLOW_PRIVATE=true`, e.g. a
receiver on the same host); the URL is still resolved once and pinned.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from om_core.errors import OMError
from om_core.webhooks.addresses import refusal

Resolver = Callable[[str, int], Sequence[str]]


class WebhookTargetRefused(OMError, ValueError):
    def __init__(self, detail: str) -> None:
        super().__init__("WEBHOOK_TARGET_REFUSED", detail)


def resolve_host(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for `host`, once each, in its order of preference: the
    only name lookup webhooks make (tests stand a rebinding DNS in for `socket.getaddrinfo` under it)."""
    found: list[str] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = str(sockaddr[0])
        if address not in found:
            found.append(address)
    return found


@dataclass(frozen=True)
class Target:
    """A URL that passed the check and the address its requests go to."""

    #: The URL as registered.
    url: str
    #: The URL's host in ASCII (IDNA) form: the `Host` header, the SNI and the name on the certificate.
    host: str
    #: `host[:port]` as the `Host` header carries it (the port only when it is not the scheme's default).
    authority: str
    port: int
    #: The checked address every connection for this URL goes to (the resolver's first choice).
    address: str
    #: Everything the host resolved to, all checked.
    addresses: tuple[str, ...]

    @property
    def pinned_url(self) -> httpx.URL:
        """The URL with its host replaced by the pinned address: what the HTTP client connects to."""
        return httpx.URL(self.url).copy_with(host=self.address)


def _parsed(url: str) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise WebhookTargetRefused(f"url is not a valid URL: {exc}") from exc
    if parsed.scheme not in ("http", "https"):
        raise WebhookTargetRefused(f"url must start with http:// or https:// (got scheme {parsed.scheme!r})")
    if not parsed.raw_host:
        raise WebhookTargetRefused("url has no host: give a full URL such as https://example.com/om-events")
    if parsed.userinfo:
        raise WebhookTargetRefused("url must not carry credentials; every request is signed instead")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise WebhookTargetRefused(f"url has an invalid port: {parsed.port} (give one from 1 to 65535)")
    return parsed


def resolve_target(url: str, *, allow_private: bool, resolve: Resolver = resolve_host) -> Target:
    """The `Target` for `url`, or `WebhookTargetRefused` saying what to change.

    The host is resolved once and every address it gives is checked; the first becomes the address to
    connect to."""
    parsed = _parsed(url)
    host = parsed.raw_host.decode("ascii")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        addresses = tuple(resolve(host, port))
    except (OSError, UnicodeError) as exc:
        raise WebhookTargetRefused(f"the host {host!r} does not resolve: {exc}") from exc
    if not addresses:
        raise WebhookTargetRefused(f"the host {host!r} resolves to no address")
    for address in addresses:
        why = refusal(address, allow_private=allow_private)
        if why is not None:
            raise WebhookTargetRefused(
                f"the host {host!r} resolves to {address}, {why}: webhooks go to public addresses only "
                "(an operator can allow private ones: OM_WEBHOOK_ALLOW_PRIVATE=true)"
            )
    return Target(
        url=url,
        host=host,
        authority=parsed.netloc.decode("ascii"),
        port=port,
        address=addresses[0],
        addresses=addresses,
    )


def check_target(url: str, *, allow_private: bool, resolve: Resolver = resolve_host) -> str:
    """`url` if the service may call it (the registration check), else `WebhookTargetRefused`."""
    return resolve_target(url, allow_private=allow_private, resolve=resolve).url
