"""Webhook rules without services: what a receiver verifies (signature, replay window), which targets are
refused and why, and the backoff's bounds."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from om_core.webhooks.policy import WebhookPolicy
from om_core.webhooks.signing import REPLAY_WINDOW_S, signature, verify
from om_core.webhooks.targets import WebhookTargetRefused, check_target
from tests.support.docs import fenced

SECRET = "whsec_test"
BODY = b'{"id":1,"type":"data-om-status"}'


def test_a_signature_verifies_and_any_change_breaks_it() -> None:
    now = int(time.time())
    header = signature(SECRET, now, BODY)
    assert header.startswith(f"t={now},v1=")
    assert verify(SECRET, header, BODY)
    assert not verify("whsec_other", header, BODY), "another secret"
    assert not verify(SECRET, header, BODY + b" "), "another body"
    assert not verify(SECRET, header.replace(f"t={now}", f"t={now + 1}"), BODY), "another timestamp"
    assert not verify(SECRET, "v1=deadbeef", BODY), "no timestamp"


def test_a_signature_older_than_the_replay_window_is_refused() -> None:
    then = int(time.time()) - REPLAY_WINDOW_S - 1
    assert not verify(SECRET, signature(SECRET, then, BODY), BODY)
    assert verify(SECRET, signature(SECRET, then, BODY), BODY, now=then + 10)


def resolver(*addresses: str):  # type: ignore[no-untyped-def]
    return lambda host, port: list(addresses)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.10", "private"),
        ("172.16.5.4", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "shared (CGNAT)"),
        ("::ffff:127.0.0.1", "loopback"),
    ],
)
def test_non_public_addresses_are_refused_with_the_reason(address: str, reason: str) -> None:
    with pytest.raises(WebhookTargetRefused) as refused:
        check_target("https://hooks.example.com/x", allow_private=False, resolve=resolver(address))
    assert f"a {reason} address" in str(refused.value) and "OM_WEBHOOK_ALLOW_PRIVATE" in str(refused.value)
    assert refused.value.code == "WEBHOOK_TARGET_REFUSED"


def test_one_private_address_among_public_ones_is_enough_to_refuse() -> None:
    with pytest.raises(WebhookTargetRefused):
        check_target(
            "https://x.example.com", allow_private=False, resolve=resolver("93.184.216.34", "10.0.0.1")
        )
    assert check_target("https://x.example.com", allow_private=False, resolve=resolver("93.184.216.34"))


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://example.com/x", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("https:///nohost", "no host"),
        ("https://user:pw@example.com/", "credentials"),
        ("https://example.com:99999/", "invalid port"),
    ],
)
def test_bad_urls_are_refused_whatever_the_operator_allows(url: str, words: str) -> None:
    with pytest.raises(WebhookTargetRefused) as refused:
        check_target(url, allow_private=True, resolve=resolver("93.184.216.34"))
    assert words in str(refused.value)


def test_the_operator_flag_allows_private_targets() -> None:
    url = "http://127.0.0.1:8080/hook"
    assert check_target(url, allow_private=True, resolve=resolver("127.0.0.1")) == url


def test_backoff_doubles_with_jitter_up_to_its_bound() -> None:
    policy = WebhookPolicy(retry_base_s=2, retry_max_s=60)
    rng = random.Random(7)
    for failures, full in ((1, 2), (2, 4), (3, 8), (6, 60), (30, 60)):
        delay = policy.backoff_s(failures, rng)
        assert full / 2 <= delay <= full


def test_the_documented_verification_snippet_accepts_our_signatures_and_refuses_replays() -> None:
    (snippet,) = [text for _, text in fenced("python") if "def verified" in text]
    scope: dict[str, Any] = {}
    exec(snippet, scope)
    verified = scope["verified"]
    now = int(time.time())
    assert verified(SECRET, signature(SECRET, now, BODY), BODY)
    assert not verified(SECRET, signature(SECRET, now, BODY), BODY + b"x")
    assert not verified(SECRET, signature(SECRET, now - 301, BODY), BODY)
