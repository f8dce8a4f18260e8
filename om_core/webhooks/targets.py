"""Which webhook URLs the service may call, and the one address a delivery run connects to.

A name is resolved once (`resolve_host`), every address it resolves to is checked (`refusal`: one
non-public address is enough to refuse the URL), and the connection then goes to an address that
passed: the `Target` carries it, and `delivery.py` makes the request to it with the URL's host kept in
the `Host` header, the TLS SNI and the certificate check. Nothing resolves the name again between the
check and the connection, so a name re-pointed after the check (DNS rebinding, a TTL of 0) changes
nothing. The same check runs when a URL is registered (a 422 that says why) and at the start of every
delivery run, because a name can be pointed elsewhere after it was registered. Only `http` and
`https`, no credentials in the URL; redirects are never followed (`delivery.py`), so a public URL
cannot bounce the request inward.

`refusal` is the one address rule: an address may be called when it is globally reachable.
`ipaddress.is_global` is the base, but an IPv6 address can carry an IPv4 address that the network stack,
a relay or a NAT64 gateway in the operator's own network turns back into an IPv4 connection:
`2002:a9fe:a9fe::` is 6to4 for 169.254.169.254, `64:ff9b::7f00:1` is NAT64 for 127.0.0.1,
`::ffff:10.0.0.1` is 10.0.0.1. Python counts some of these wrappers as global (6to4, NAT64) and others
as private (Teredo, IPv4-mapped), so its verdict on the wrapper says nothing: every embedded address is
unwrapped and judged on its own, and the wrapper prefix is not judged. The embeddings handled:

- IPv4-mapped `::ffff:0:0/96`, IPv4-translated `::ffff:0:0:0/96`, IPv4-compatible `::/96` (deprecated,
  but still an IPv4 address to some stacks);
- NAT64 `64:ff9b::/96` (RFC 6052); the local-use NAT64 prefix `64:ff9b:1::/48` (RFC 8215) is refused
  outright: where its IPv4 address sits depends on the operator's prefix length;
- 6to4 `2002::/16` (`ipaddress.sixtofour`);
- Teredo `2001::/32` (`ipaddress.teredo`): the server and the client address must both be global;
- ISATAP interface identifiers (`…:0:5efe:a.b.c.d`, `…:200:5efe:a.b.c.d`) under any prefix: the prefix
  is judged as usual and the IPv4 address in the interface identifier too.

The Python this runs on (3.11) calls a few non-public IPv6 ranges global; they are named here (site-local
`fec0::/10`, documentation `3fff::/20`), and multicast, which `is_global` lets through, is refused.
Operator-specific NAT64 prefixes (RFC 6052 network-specific prefixes) cannot be recognised from the
address: an operator running one should also filter at its gateway.

The operator may allow every address (`OM_WEBHOOK_ALLOW_PRIVATE=true`, e.g. a receiver on the same
host); the URL is still resolved once and pinned.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from om_core.errors import OMError

# ------------------------------------------------------------------------------------- one address

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")
_DOCUMENTATION_V6 = ipaddress.IPv6Network("3fff::/20")
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")

#: Prefixes whose low 32 bits are an IPv4 address, and the name a refusal gives them.
_IPV4_IN_LOW_BITS: tuple[tuple[str, ipaddress.IPv6Network], ...] = (
    ("IPv4-mapped", ipaddress.IPv6Network("::ffff:0:0/96")),
    ("IPv4-translated", ipaddress.IPv6Network("::ffff:0:0:0/96")),
    ("IPv4-compatible", ipaddress.IPv6Network("::/96")),
    ("NAT64", ipaddress.IPv6Network("64:ff9b::/96")),
)

#: The upper half of an ISATAP interface identifier (RFC 5214: 00-00-5E-FE, with the u/g bits free).
_ISATAP_MARK, _ISATAP_MASK = 0x00005EFE, 0xFCFFFFFF


def _low_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)


def _wrapped(ip: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses a wrapper prefix stands for: when any, the connection really goes there."""
    found: list[tuple[str, ipaddress.IPv4Address]] = []
    for name, network in _IPV4_IN_LOW_BITS:
        # `::` and `::1` are themselves (unspecified, loopback), not IPv4-compatible addresses.
        if ip in network and not (name == "IPv4-compatible" and int(ip) <= 1):
            found.append((name, _low_ipv4(ip)))
    if ip.sixtofour is not None:
        found.append(("6to4", ip.sixtofour))
    if ip.teredo is not None:
        server, client = ip.teredo
        found += [("Teredo server", server), ("Teredo client", client)]
    return found


def _isatap(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    interface_high = (int(ip) >> 32) & 0xFFFFFFFF
    return _low_ipv4(ip) if interface_high & _ISATAP_MASK == _ISATAP_MARK else None


def _in(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> Callable[[IPAddress], bool]:
    return lambda ip: ip.version == network.version and ip in network


#: Why one (unwrapped) address is not public, the most specific reason first: Python counts several of
#: these ranges as "private" too, and the reason is what the tenant reads.
_REASONS: tuple[tuple[str, Callable[[IPAddress], bool]], ...] = (
    ("loopback", lambda ip: ip.is_loopback),
    ("link-local", lambda ip: ip.is_link_local),
    ("multicast", lambda ip: ip.is_multicast),
    ("unspecified", lambda ip: ip.is_unspecified),
    ("shared (CGNAT)", _in(_CGNAT)),
    ("site-local", _in(_SITE_LOCAL)),
    ("local-use NAT64", _in(_LOCAL_NAT64)),
    ("documentation", _in(_DOCUMENTATION_V6)),
    ("reserved", lambda ip: ip.is_reserved),
    ("private", lambda ip: ip.is_private),
    ("non-global", lambda ip: not ip.is_global),
)


def _kind(ip: IPAddress) -> str | None:
    """Which non-public kind `ip` is, judged as itself (no unwrapping); None when it is public."""
    return next((reason for reason, hit in _REASONS if hit(ip)), None)


def refusal(address: str, *, allow_private: bool) -> str | None:
    """None when the service may connect to `address`; otherwise why not, worded to follow the address
    in a sentence ("a loopback address", "which wraps 127.0.0.1 (6to4), a loopback address").

    `address` is an IP address as a resolver gives it (an IPv6 zone such as `%eth0` is allowed)."""
    if allow_private:
        return None
    ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])
    judged: list[tuple[str | None, IPAddress]] = [(None, ip)]
    if isinstance(ip, ipaddress.IPv6Address):
        wrapped = _wrapped(ip)
        if wrapped:
            judged = list(wrapped)  # the wrapper prefix says nothing about where the packets go
        inside = _isatap(ip)
        if inside is not None:
            judged.append(("ISATAP", inside))
    for wrapper, candidate in judged:
        kind = _kind(candidate)
        if kind is not None:
            return (
                f"a {kind} address"
                if wrapper is None
                else f"which wraps {candidate} ({wrapper}), a {kind} address"
            )
    return None


# ----------------------------------------------------------------------------------------- one URL


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
