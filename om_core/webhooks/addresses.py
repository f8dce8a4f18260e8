"""Whether the service may open a connection to one IP address: the single rule every webhook check uses.

An address may be called when it is globally reachable. `ipaddress.is_global` is the base, but an IPv6
address can carry an IPv4 address inside it that the network stack (or a relay, or a NAT64 gateway in
the operator's own network) turns back into an IPv4 connection: `2002:a9fe:a9fe::` is 6to4 for
169.254.169.254, `64:ff9b::7f00:1` is NAT64 for 127.0.0.1, `::ffff:10.0.0.1` is 10.0.0.1. Python
counts some of these wrappers as global (6to4, NAT64), others as private (Teredo, IPv4-mapped), so the
verdict on the wrapper itself says nothing: every embedded address is unwrapped and judged on its own,
and the wrapper prefix is not judged at all. The embeddings handled:

- IPv4-mapped `::ffff:0:0/96`, IPv4-translated `::ffff:0:0:0/96`, IPv4-compatible `::/96` (deprecated,
  but still an IPv4 address to some stacks);
- NAT64 `64:ff9b::/96` (RFC 6052); the local-use NAT64 prefix `64:ff9b:1::/48` (RFC 8215) is refused
  outright: where its IPv4 address sits depends on the operator's prefix length;
- 6to4 `2002::/16` (`ipaddress.sixtofour`);
- Teredo `2001::/32` (`ipaddress.teredo`): both the server and the client address must be global;
- ISATAP interface identifiers (`…:0:5efe:a.b.c.d`, `…:200:5efe:a.b.c.d`) under any prefix: the prefix
  is judged as usual and the IPv4 address in the interface identifier as well.

The Python this runs on (3.11) calls a few non-public IPv6 ranges global; they are named here too
(site-local `fec0::/10`, documentation `3fff::/20`), and multicast, which `is_global` lets through, is
refused. Operator-specific NAT64 prefixes (RFC 6052 network-specific prefixes) cannot be recognised
from the address: an operator running one should also filter at its gateway.

`OM_WEBHOOK_ALLOW_PRIVATE=true` (the operator's switch) allows every address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

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
