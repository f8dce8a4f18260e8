"""Standard Webhooks signing without services: om's signatures match the `standardwebhooks` library's own
`sign`, several secrets give several signatures, and an old `whsec_<hex>` secret reads as a key."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from om_core.webhooks.signing import (
    new_secret,
    secret_key,
    standard_headers,
    standard_signature,
    verify_standard,
)

BODY = b'{"id":7,"type":"data-om-status"}'


def test_om_signs_what_the_library_signs() -> None:
    secret, now = new_secret(), int(time.time())
    expected = Webhook(secret).sign("evt_7", datetime.fromtimestamp(now, UTC), BODY.decode())
    assert standard_signature(secret, "evt_7", now, BODY) == expected


def test_two_secrets_two_signatures_each_verifies_and_changes_break_them() -> None:
    old, new, now = new_secret(), new_secret(), int(time.time())
    headers = standard_headers([new, old], "evt_7", now, BODY)
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert verify_standard(new, headers, BODY) and verify_standard(old, headers, BODY)
    assert not verify_standard(new_secret(), headers, BODY), "another secret"
    assert not verify_standard(new, headers, BODY + b" "), "another body"
    assert not verify_standard(new, {**headers, "webhook-id": "evt_8"}, BODY), "another id"
    assert not verify_standard(new, headers, BODY, now=now + 301), "outside the replay window"


def test_a_hex_secret_from_before_standard_webhooks_is_a_key_too() -> None:
    old = "whsec_" + "ab12" * 12
    assert len(secret_key(old)) == 36
    headers = standard_headers([old], "evt_1", int(time.time()), BODY)
    Webhook(old).verify(BODY, headers)  # raises when it does not verify


def test_a_secret_that_is_not_base64_is_refused() -> None:
    with pytest.raises(ValueError, match="base64"):
        secret_key("whsec_not base64!")
