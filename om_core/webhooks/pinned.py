"""A webhook request made to the address its URL was checked at, never to a fresh lookup of the name.

The HTTP client is handed the URL with its host replaced by the checked address (`Target.pinned_url`), so
it has no name to resolve; the receiver still sees the registered host: it is the `Host` header, and for
https it is the TLS server name (httpx's `sni_hostname` request extension, which httpcore gives to
`ssl.SSLContext.wrap_*` as `server_hostname`), so the SNI is the host's and the certificate is verified
against the host, not the address. This uses only httpx's public API; the connection pool is keyed by
the address, which is what is connected to.

The client this module builds ignores the environment's proxies (`HTTP_PROXY`, `HTTPS_PROXY`): a proxy
would make its own connection (and, for a tunnel, httpcore would send the address as SNI), so the
pinning could not be promised. It keeps the environment's trust store (`SSL_CERT_FILE`, `SSL_CERT_DIR`)
for operators whose receivers use a private CA. Redirects are not followed and both the connect and the
read are bounded, whatever client a caller passes.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from om_core.webhooks.targets import Target


def client() -> httpx.Client:
    """The delivery run's HTTP client: environment trust store, no environment proxies, no redirects."""
    return httpx.Client(
        verify=httpx.create_ssl_context(trust_env=True), trust_env=False, follow_redirects=False
    )


def post(
    http: httpx.Client, target: Target, body: bytes, headers: Mapping[str, str], *, timeout: httpx.Timeout
) -> httpx.Response:
    """POST `body` to `target` at its pinned address, with the target's host as `Host` and TLS name."""
    return http.post(
        target.pinned_url,
        content=body,
        headers={**headers, "Host": target.authority},
        extensions={"sni_hostname": target.host},
        timeout=timeout,
        follow_redirects=False,
    )
