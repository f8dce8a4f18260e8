"""When `om flower` needs a login: on any address but loopback, unless Flower's own OAuth is set."""

from __future__ import annotations

import pytest

from om_app.preflight import check_flower_auth


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.53", "::1", "localhost"])
def test_loopback_needs_no_login(address: str) -> None:
    assert check_flower_auth(address, {}) == []


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "10.1.2.3", "flower.internal"])
def test_any_other_address_needs_one(address: str) -> None:
    (problem,) = check_flower_auth(address, {})
    assert problem.setting == "FLOWER_BASIC_AUTH"
    assert f"Flower on {address} would be open" in problem.message
    assert check_flower_auth(address, {"FLOWER_BASIC_AUTH": "admin:pw,ops:other"}) == []
    assert check_flower_auth(address, {"FLOWER_AUTH": ".*@example\\.com"}) == [], "Flower's OAuth"


@pytest.mark.parametrize("login", ["admin", "admin:", ":pw", "admin:pw,ops"])
def test_a_login_without_user_and_password_is_refused(login: str) -> None:
    (problem,) = check_flower_auth("0.0.0.0", {"FLOWER_BASIC_AUTH": login})
    assert problem.message == "FLOWER_BASIC_AUTH must be user:password (several: comma-separated)"
