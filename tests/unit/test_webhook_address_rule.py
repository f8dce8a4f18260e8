"""The one address rule (`targets.refusal`) and the pinned target (`targets.resolve_target`), without
services: which addresses are refused and why, the ranges Python 3.11 calls global by mistake, the
embeddings unwrapped, and the address a run connects to."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from om_core.webhooks.targets import Resolver, WebhookTargetRefused, refusal, resolve_target


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("fec0::1", "a site-local address"),
        ("3fff::1", "a documentation address"),
        ("ff0e::1", "a multicast address"),
        ("224.0.0.251", "a multicast address"),
        ("64:ff9b:1::808:808", "a local-use NAT64 address"),
        ("fe80::1%eth0", "a link-local address"),
        ("fd00::1", "a private address"),
        ("::", "a unspecified address"),
        ("::1", "a loopback address"),
        ("2002:808:808:1:200:5efe:a00:1", "which wraps 10.0.0.1 (ISATAP), a private address"),
        ("fd00::5efe:808:808", "a private address"),
        ("2001:0:a00:1::", "which wraps 10.0.0.1 (Teredo server), a private address"),
        ("::ffff:0:a9fe:a9fe", "which wraps 169.254.169.254 (IPv4-translated), a link-local address"),
    ],
)
def test_an_address_that_is_not_public_is_refused_with_the_reason(address: str, why: str) -> None:
    assert refusal(address, allow_private=False) == why
    assert refusal(address, allow_private=True) is None, "the operator's switch allows every address"


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "2606:4700::1111",
        "2002:808:808::",
        "64:ff9b::808:808",
        "::ffff:8.8.8.8",
        "2a00::5efe:808:808",
    ],
)
def test_a_public_address_or_a_wrapper_of_one_is_allowed(address: str) -> None:
    assert refusal(address, allow_private=False) is None


def answers(*addresses: str) -> tuple[list[tuple[str, int]], Resolver]:
    asked: list[tuple[str, int]] = []

    def resolve(host: str, port: int) -> Sequence[str]:
        asked.append((host, port))
        return list(addresses)

    return asked, resolve


def test_the_target_is_resolved_once_and_pinned_to_the_first_address() -> None:
    asked, resolve = answers("93.184.216.34", "2606:2800:220:1::1")
    target = resolve_target("https://Hooks.Example.com:8443/om?x=1", allow_private=False, resolve=resolve)
    assert asked == [("hooks.example.com", 8443)]
    assert target.address == "93.184.216.34" and target.addresses == ("93.184.216.34", "2606:2800:220:1::1")
    assert (target.host, target.authority, target.port) == (
        "hooks.example.com",
        "hooks.example.com:8443",
        8443,
    )
    assert str(target.pinned_url) == "https://93.184.216.34:8443/om?x=1"


def test_an_ipv6_pin_and_an_idna_host_keep_their_forms() -> None:
    _, resolve = answers("2606:2800:220:1::1")
    target = resolve_target("http://bücher.example/hook", allow_private=False, resolve=resolve)
    assert target.host == "xn--bcher-kva.example" and target.authority == "xn--bcher-kva.example"
    assert str(target.pinned_url) == "http://[2606:2800:220:1::1]/hook"


def test_every_resolved_address_is_checked_even_when_the_operator_allows_private_ones() -> None:
    _, resolve = answers("8.8.8.8", "2002:7f00:1::")
    with pytest.raises(WebhookTargetRefused) as refused:
        resolve_target("https://x.example/", allow_private=False, resolve=resolve)
    assert "resolves to 2002:7f00:1::, which wraps 127.0.0.1 (6to4), a loopback address" in str(refused.value)
    pinned = resolve_target("https://x.example/", allow_private=True, resolve=resolve)
    assert pinned.address == "8.8.8.8", "allowed targets are still resolved once and pinned"


def test_a_host_that_resolves_to_nothing_is_refused() -> None:
    _, resolve = answers()
    with pytest.raises(WebhookTargetRefused, match="resolves to no address"):
        resolve_target("https://x.example/", allow_private=True, resolve=resolve)
