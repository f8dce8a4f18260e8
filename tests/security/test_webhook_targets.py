"""Issue 28 item 7: a tenant's webhook reaches only the public address that was checked.

The attacker holds one ordinary tenant key and controls the DNS of its own names. `RebindingDns` stands in
for that DNS at `socket.getaddrinfo`, the one lookup under both the service's resolver and the HTTP
client's connect (names it does not own go to the real resolver), so the test never touches the HTTP
client: whatever the service connects to, it connects to through the real socket layer.

- Rebinding: the name answers a public address to the registration and to the first lookup of the
  delivery, then 127.0.0.1, where a canary listens. Before the fix the client resolved the name again
  and the canary got the signed event; now the run connects to the address it checked, and the next run
  refuses the loopback answer, both recorded failed with the reason the tenant can read.
- IPv6 forms that carry an IPv4 address (6to4, Teredo server and client, IPv4-mapped, -compatible,
  NAT64, ISATAP) of 169.254.169.254, 127.0.0.1 and 10.0.0.1 are refused at registration (422 naming
  `body.url`, the message saying what the address wraps) and at delivery.
- Pinning keeps TLS: an HTTPS receiver on 127.0.0.1 (the operator allows private targets) with a
  certificate for the host name only, trusted through the test's CA bundle (`SSL_CERT_FILE`), receives
  the event with the host's `Host` header and SNI; a name the certificate does not carry is refused by
  the certificate check, so the check is on and is made against the name, not the address.
- A receiver that redirects toward the canary gets its 3xx recorded as the failure; nothing follows it.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trustme
from sqlalchemy import Engine
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.tenancy import access
from om_core.webhooks import store
from om_core.webhooks.delivery import RunReport, deliver_endpoint
from om_core.webhooks.policy import WebhookPolicy
from om_core.webhooks.signing import SIGNATURE_HEADER_STANDARD
from tests.support.listener import Listener, listening

pytestmark = [pytest.mark.postgres]

#: A public address the attacker's name answers with while it is being checked.
PUBLIC = "93.184.216.34"
#: Delivery as the worker runs it, minus the settle age (the test's events are read at once) and with a
#: short connect bound (the public address above is not reachable from the test machine).
POLICY = WebhookPolicy(allow_private=False, settle_s=0, connect_timeout_s=2.0, timeout_s=5.0)

Getaddrinfo = Callable[..., list[tuple[Any, ...]]]


# ------------------------------------------------------------------------------------- attacker's DNS


class RebindingDns:
    """The attacker's DNS: each lookup of one of its names takes the next scripted answer (the last one
    repeats, as with a TTL of 0); every other name goes to the real resolver."""

    def __init__(self, real: Getaddrinfo) -> None:
        self.real = real
        self.scripts: dict[str, list[list[str]]] = {}
        self.lookups: list[str] = []
        self.lock = threading.Lock()

    def script(self, host: str, *answers: list[str]) -> None:
        self.scripts[host] = list(answers)

    def count(self, host: str) -> int:
        with self.lock:
            return self.lookups.count(host)

    def __call__(
        self, host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        with self.lock:
            script = self.scripts.get(name)
            if script is None:
                return self.real(host, port, family, type, proto, flags)
            self.lookups.append(name)
            answer = script.pop(0) if len(script) > 1 else script[0]
        number = int(port or 0)
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, number, 0, 0))
            if ":" in a
            else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, number))
            for a in answer
        ]


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> RebindingDns:
    fake = RebindingDns(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


def attacker_name() -> str:
    return f"h{uuid.uuid4().hex[:10]}.attacker.test"


# ------------------------------------------------------------------------------------------ the API


@dataclass
class Attacker:
    client: TestClient
    db: Engine
    key: str = ""
    tenant: str = ""

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.client.request(method, path, headers={"Authorization": f"Bearer {self.key}"}, **kwargs)

    def register(self, url: str) -> Any:
        return self.call("POST", "/v1/webhooks", json={"url": url, "events": ["*"]})

    def turn(self, thread: str) -> None:
        body = {"messages": [{"id": uuid.uuid4().hex[:8], "role": "user", "text": "hi"}], "resource_id": "r"}
        response = self.call("POST", f"/v1/threads/{thread}/turns", json=body)
        assert response.status_code < 300, response.text

    def deliveries(self, endpoint_id: str) -> dict[str, Any]:
        response = self.call("GET", f"/v1/webhooks/{endpoint_id}/deliveries")
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """Both stores, each shared by the module's tests (every test is its own tenant)."""
    if request.param == "postgres":
        yield request.getfixturevalue("pg_engine")
        return
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('webhook-targets') / 'om.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


@contextmanager
def serving(database: Engine, **settings: Any) -> Iterator[TestClient]:
    api_settings = ApiSettings(
        database_url=database.url.render_as_string(hide_password=False),
        auth="keys",
        executor="inline",
        model="om-local/extractive",
        **settings,
    )
    with TestClient(create_app(api_settings)) as client:
        yield client


@contextmanager
def attacking(client: TestClient, database: Engine) -> Iterator[Attacker]:
    """A new tenant and its key on `client`; its endpoints are removed afterwards, so no later test's
    beat (the database outlives the test) delivers them."""
    tenant = f"wh-attacker-{uuid.uuid4().hex[:8]}"
    try:
        yield Attacker(client, database, access.create_key(database, tenant, "attacker").secret, tenant)
    finally:
        for endpoint in store.list_for(database, tenant, limit=1000, after=None):
            store.remove(database, endpoint.id, tenant)


@pytest.fixture(scope="module")
def operator_defaults(database: Engine) -> Iterator[TestClient]:
    """The API with the operator's defaults: private targets not allowed."""
    with serving(database) as client:
        yield client


@pytest.fixture
def attacker(operator_defaults: TestClient, database: Engine) -> Iterator[Attacker]:
    with attacking(operator_defaults, database) as found:
        yield found


def deliver(db: Engine, endpoint_id: str, policy: WebhookPolicy = POLICY, later_s: float = 0) -> RunReport:
    """One delivery run as the `om.webhook` worker makes it; `later_s` moves the clock past a backoff."""
    return deliver_endpoint(
        db, endpoint_id, policy, clock=lambda: datetime.now(UTC) + timedelta(seconds=later_s)
    )


# ---------------------------------------------------------------------------------------- rebinding


@pytest.fixture
def canary() -> Iterator[Listener]:
    with listening() as listener:
        yield listener


def test_a_name_rebound_to_loopback_after_the_check_is_never_connected_to(
    attacker: Attacker, dns: RebindingDns, canary: Listener
) -> None:
    host = attacker_name()
    port = int(canary.url.rsplit(":", 1)[1])
    # Registration and the delivery's check see a public address; any later lookup gets the canary.
    dns.script(host, [PUBLIC], [PUBLIC], ["127.0.0.1"])
    created = attacker.register(f"http://{host}:{port}/hook")
    assert created.status_code == 201, created.text
    endpoint_id = created.json()["id"]
    attacker.turn("t")

    first = deliver(attacker.db, endpoint_id)
    assert canary.received == [], "the request went to the address the name was rebound to"
    assert first.failed and first.delivered == 0
    assert dns.count(host) == 2, "the run looked the name up once, at its check"
    (attempt,) = attacker.deliveries(endpoint_id)["items"]
    assert attempt["outcome"] == "failed"
    assert f"connecting to {PUBLIC} for {host}" in attempt["error"], attempt

    second = deliver(attacker.db, endpoint_id, later_s=POLICY.retry_max_s * 2)
    assert canary.received == []
    assert second.failed and dns.count(host) == 3
    state = attacker.deliveries(endpoint_id)
    assert state["state"] == "failing" and state["failures"] == 2
    assert "resolves to 127.0.0.1, a loopback address" in state["last_error"], state
    assert len(state["items"]) == 1, "a refused target is not an attempt: no request was made"


# ------------------------------------------------------------------------------ IPv4 inside IPv6


def _v6(value: int) -> str:
    return str(ipaddress.IPv6Address(value))


def _v4(address: str) -> int:
    return int(ipaddress.IPv4Address(address))


#: A public Teredo server and client, for the side of a Teredo address the attacker does not use.
TEREDO_PUBLIC = "65.54.227.120"


def _teredo(server: str, client: str) -> str:
    # 2001:0000:<server>:<flags>:<port, inverted>:<client, inverted>
    return _v6((0x20010000 << 96) | (_v4(server) << 64) | (0xFFFF << 32) | (~_v4(client) & 0xFFFFFFFF))


#: Each way to write an IPv6 address that reaches (or names) an IPv4 one.
WRAPPERS: dict[str, Callable[[str], str]] = {
    "6to4": lambda a: _v6((0x2002 << 112) | (_v4(a) << 80)),
    "Teredo client": lambda a: _teredo(TEREDO_PUBLIC, a),
    "Teredo server": lambda a: _teredo(a, TEREDO_PUBLIC),
    "IPv4-mapped": lambda a: _v6(0xFFFF << 32 | _v4(a)),
    "IPv4-compatible": lambda a: _v6(_v4(a)),
    "NAT64": lambda a: _v6((0x64FF9B << 96) | _v4(a)),
    "ISATAP": lambda a: _v6((0x26064700 << 96) | (0x02005EFE << 32) | _v4(a)),
}
INSIDE = {"169.254.169.254": "link-local", "127.0.0.1": "loopback", "10.0.0.1": "private"}
CASES = [(w, a) for w in WRAPPERS for a in INSIDE]


def _ids(case: tuple[str, str]) -> str:
    return f"{case[0]}-{case[1]}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_ipv6_forms_of_internal_addresses_are_refused_at_registration(
    attacker: Attacker, dns: RebindingDns, case: tuple[str, str]
) -> None:
    wrapper, inside = case
    wrapped = WRAPPERS[wrapper](inside)
    host = attacker_name()
    dns.script(host, [wrapped])
    for url in (f"https://{host}/hook", f"http://[{wrapped}]:8080/hook"):
        response = attacker.register(url)
        assert response.status_code == 422, (url, response.text)
        error = response.json()["error"]
        assert error["code"] == "webhook_target_refused" and error["field"] == "body.url", error
        assert f"which wraps {inside} ({wrapper}), a {INSIDE[inside]} address" in error["message"], error
        assert "OM_WEBHOOK_ALLOW_PRIVATE" in error["message"], error
    assert attacker.call("GET", "/v1/webhooks").json()["items"] == []


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_ipv6_forms_of_internal_addresses_are_refused_at_delivery(
    attacker: Attacker, dns: RebindingDns, case: tuple[str, str]
) -> None:
    wrapper, inside = case
    host = attacker_name()
    dns.script(host, [PUBLIC], [WRAPPERS[wrapper](inside)])
    created = attacker.register(f"https://{host}/hook")
    assert created.status_code == 201, created.text
    attacker.turn("t")
    report = deliver(attacker.db, created.json()["id"])
    state = attacker.deliveries(created.json()["id"])
    assert report.failed and report.delivered == 0 and state["items"] == [], state
    assert state["state"] == "failing"
    assert f"which wraps {inside} ({wrapper}), a {INSIDE[inside]} address" in state["last_error"], state


def test_ipv6_forms_of_public_addresses_are_still_allowed(attacker: Attacker, dns: RebindingDns) -> None:
    """The unwrapping judges what is inside: a wrapper of a public address is public (a control, so the
    refusals above cannot come from refusing every IPv6 form)."""
    for wrapper in ("6to4", "Teredo client", "NAT64", "IPv4-mapped"):
        host = attacker_name()
        dns.script(host, [WRAPPERS[wrapper]("8.8.8.8")])
        response = attacker.register(f"https://{host}/hook")
        assert response.status_code == 201, (wrapper, response.text)


# ------------------------------------------------------------------------------------ pinned TLS


@dataclass
class TlsReceiver:
    """An HTTPS server on 127.0.0.1 whose certificate names `hooks.pinned.test` only; it records the SNI
    of every handshake and every request."""

    server: ThreadingHTTPServer
    sni: list[str | None] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


@pytest.fixture
def tls_receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TlsReceiver]:
    ca = trustme.CA()
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))  # the delivery client's trust store, as an operator's

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("hooks.pinned.test").configure_cert(context)
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    receiver = TlsReceiver(server)

    def seen(_: Any, name: str | None, __: Any) -> None:
        receiver.sni.append(name)

    context.sni_callback = seen

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            receiver.requests.append((self.path, dict(self.headers.items()), body))
            self.send_response(204)
            self.end_headers()

    server.RequestHandlerClass = Handler
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield receiver
    server.shutdown()
    server.server_close()


def test_a_pinned_https_delivery_keeps_the_host_header_sni_and_certificate_check(
    database: Engine, dns: RebindingDns, tls_receiver: TlsReceiver
) -> None:
    open_policy = replace(POLICY, allow_private=True)
    with serving(database, webhook_allow_private=True) as client, attacking(client, database) as attacker:
        dns.script("hooks.pinned.test", ["127.0.0.1"])
        dns.script("wrong.pinned.test", ["127.0.0.1"])
        good = attacker.register(f"https://hooks.pinned.test:{tls_receiver.port}/hook")
        wrong = attacker.register(f"https://wrong.pinned.test:{tls_receiver.port}/hook")
        assert good.status_code == 201 and wrong.status_code == 201, (good.text, wrong.text)
        attacker.turn("t")

        report = deliver(attacker.db, good.json()["id"], open_policy)
        assert report.delivered == 1 and not report.failed, attacker.deliveries(good.json()["id"])
        assert dns.count("hooks.pinned.test") == 2, "registration, then one lookup for the run"
        ((path, headers, body),) = tls_receiver.requests
        assert path == "/hook" and headers["Host"] == f"hooks.pinned.test:{tls_receiver.port}"
        assert tls_receiver.sni == ["hooks.pinned.test"], "the handshake named the host, not 127.0.0.1"
        assert headers[SIGNATURE_HEADER_STANDARD] and json.loads(body)["type"]

        refused = deliver(attacker.db, wrong.json()["id"], open_policy)
        assert refused.failed and len(tls_receiver.requests) == 1, "no request over an unverified TLS"
        assert tls_receiver.sni[-1] == "wrong.pinned.test"
        (attempt,) = attacker.deliveries(wrong.json()["id"])["items"]
        assert "CERTIFICATE_VERIFY_FAILED" in attempt["error"], attempt


# -------------------------------------------------------------------------------------- redirects


def test_a_redirect_toward_an_internal_address_is_not_followed(
    database: Engine, dns: RebindingDns, canary: Listener
) -> None:
    """A receiver answers 307 to the canary: the delivery fails on the 3xx, the canary hears nothing
    (the operator allows private targets here so the redirecting receiver can sit on 127.0.0.1; with
    redirects followed, a public receiver could bounce the request anywhere)."""
    redirects: list[str] = []

    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def do_POST(self) -> None:
            redirects.append(self.path)
            self.send_response(307)
            self.send_header("Location", f"{canary.url}/v1/stolen")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dns.script("bounce.attacker.test", ["127.0.0.1"])
        with serving(database, webhook_allow_private=True) as client, attacking(client, database) as attacker:
            created = attacker.register(f"http://bounce.attacker.test:{server.server_address[1]}/hook")
            assert created.status_code == 201, created.text
            attacker.turn("t")
            report = deliver(attacker.db, created.json()["id"], replace(POLICY, allow_private=True))
            assert redirects == ["/hook"] and canary.received == []
            (attempt,) = attacker.deliveries(created.json()["id"])["items"]
            assert report.failed and attempt["status_code"] == 307 and attempt["error"] == "HTTP 307"
    finally:
        server.shutdown()
        server.server_close()
