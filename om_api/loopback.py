"""Without authentication the API is a local service, and answers only what a local client sends.

`OM_AUTH=none` (what `om up` runs) trusts whoever reaches the port. Binding 127.0.0.1 keeps other
machines out, but not the web pages open in the user's own browser:

- **DNS rebinding.** A page on `attacker.example` re-points its own name at 127.0.0.1; the browser then
  treats the API as the page's own origin, so the page reads and writes every thread. Its requests name
  the attacker's host: `Host: attacker.example:8088`. A local client names the server by a loopback name,
  so any other `Host` is refused with 421 (that is not a name this server answers for).
- **Cross-site requests.** A page that does not rebind can still send requests to 127.0.0.1 (a form post,
  a `no-cors` fetch) without reading the answers; a state change needs no answer. Browsers mark each such
  request with the page's `Origin`, so a request whose `Origin` is not a loopback origin is refused with
  403, whatever its method (a cross-site page has no business with the API at all). Clients that are not
  browsers send no `Origin` and are not affected, nor is the dashboard (it is served from the API itself).

Loopback names: `localhost` and its subdomains (browsers resolve `*.localhost` to loopback themselves, so a
page cannot rebind them), IPv4 literals in 127.0.0.0/8, `[::1]` and IPv4-mapped loopback, each with or
without a port. With keys (`OM_AUTH=keys`) none of this applies: the middleware is not installed.

The same rule decides whether `om serve` may start without authentication (`loopback_bind`).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from functools import lru_cache

from starlette.types import ASGIApp, Receive, Scope, Send

from om_api.errors import error_body

LOOPBACK_NAMES = "localhost, *.localhost, 127.0.0.0/8, [::1]"


def loopback_name(name: str) -> bool:
    """`name` (no port, no brackets, lower case) is one only this machine can be reached by."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def host_name(value: str) -> str | None:
    """The name in a `Host` value (`name`, `name:port`, `[v6]`, `[v6]:port`), lower case and without a
    trailing dot; None if the value is not one of these forms (an IPv6 literal must be bracketed)."""
    value = value.strip().lower()
    if value.startswith("["):
        name, closed, port = value[1:].partition("]")
        if not closed:
            return None
    else:
        name, colon, digits = value.partition(":")
        port = colon + digits
    if port and not (port[0] == ":" and port[1:].isascii() and port[1:].isdigit()):
        return None
    return name.removesuffix(".")


@lru_cache(maxsize=1024)
def loopback_host(value: bytes) -> bool:
    """A `Host` header value that names this machine by a loopback name (cached: the API sees few)."""
    name = host_name(value.decode("latin-1"))
    return name is not None and loopback_name(name)


@lru_cache(maxsize=1024)
def loopback_origin(value: bytes) -> bool:
    """An `Origin` header value of a page served from a loopback name (`null` is not: it hides where the
    request comes from)."""
    scheme, separator, rest = value.decode("latin-1").strip().lower().partition("://")
    if not separator or scheme not in ("http", "https") or "/" in rest or "@" in rest:
        return False
    name = host_name(rest)
    return name is not None and loopback_name(name)


def loopback_bind(address: str) -> bool:
    """A bind address (`127.0.0.1`, `::1`, `[::1]`, `localhost`) that only this machine can connect to.
    Any other name is not trusted: it may resolve to an outside address."""
    name = address.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return bool(name) and loopback_name(name)


class LoopbackOnly:
    """Refuses requests that do not come from a local client (see the module docstring); installed only
    in no-auth mode. Pure ASGI: a scan of the headers, the verdicts cached per distinct value."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = _refusal(scope.get("headers") or [])
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, code, message = refusal
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
            return
        body = json.dumps(error_body(code, message)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _refusal(headers: Iterable[tuple[bytes, bytes]]) -> tuple[int, str, str] | None:
    """(status, code, message) when the headers are not a local client's; None when they are."""
    hosts = 0
    for name, value in headers:
        if name == b"host":
            hosts += 1
            if not loopback_host(value):
                return 421, "misdirected_request", _host_message(value)
        elif name == b"origin" and not loopback_origin(value):
            return 403, "cross_origin_request", _origin_message(value)
    if hosts == 0:
        return 421, "misdirected_request", _host_message(None)
    return None


def _host_message(value: bytes | None) -> str:
    named = "no Host header" if value is None else f"Host {value.decode('latin-1')[:100]!r}"
    return (
        "this server runs without authentication (OM_AUTH=none), so it answers only requests that name it "
        f"by a loopback name ({LOOPBACK_NAMES}), and this one has {named}: connect to "
        "http://127.0.0.1:<port> or http://localhost:<port>, or run the server with OM_AUTH=keys to serve "
        "other names"
    )


def _origin_message(value: bytes) -> str:
    return (
        "this server runs without authentication (OM_AUTH=none), so it answers no request sent by a web "
        f"page from elsewhere, and this one comes from Origin {value.decode('latin-1')[:100]!r}: call the "
        "API from a page served on a loopback name, or from a client that is not a browser, or run the "
        "server with OM_AUTH=keys"
    )
