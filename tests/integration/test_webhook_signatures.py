"""Webhook deliveries verify with the `standardwebhooks` libraries, in Python and in TypeScript, before and
after a secret rotation (issue 32).

The API (keys, inline executor) registers endpoints and serves turns; each delivery run is the one the
`om.webhook` worker makes (`deliver_endpoint`), to a loopback receiver over real HTTP. Every request the
receiver got is then verified by the `standardwebhooks` package from PyPI and by the npm package of the
same name, run by Node.js (tests/integration/webhooks_node/, installed from its lockfile once per lockfile
into `.cache/`). Nothing of om's own verifies: a receiver written against the specification would accept
exactly what these accept.

- A new endpoint's secret is `whsec_<base64>`; its deliveries carry `webhook-id` (`evt_<outbox id>`),
  `webhook-timestamp` and one `v1` signature, and no deprecated `OM-Signature`.
- After `rotate-secret`, deliveries carry two signatures: receivers holding the old or the new secret
  both verify. After `DELETE previous-secret` (or once the overlap expired) only the new one does.
- A legacy endpoint (what migration 0010 makes of one registered before it, secret `whsec_<hex>`) gets
  the deprecated header too, and its old secret also verifies the standard headers in both libraries.
- Another tenant's rotation or drop is "not found"; an overlap past 7 days is a 422 naming the field.
- The receiving examples of docs/guide/hooks-and-webhooks.md (Python and JavaScript) accept real
  deliveries with either secret during a rotation and refuse them with a wrong one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, update
from standardwebhooks import Webhook, WebhookVerificationError
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.store import schema
from om_core.tenancy import access
from om_core.webhooks import store
from om_core.webhooks.delivery import deliver_endpoint
from om_core.webhooks.policy import WebhookPolicy
from om_core.webhooks.signing import SIGNATURE_HEADER, verify
from tests.support.docs import fenced
from tests.support.listener import Listener, Received, listening

pytestmark = [pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[2]
NODE_PACKAGE = Path(__file__).resolve().parent / "webhooks_node"
NODE_CACHE = REPO / ".cache" / "webhooks-node"
POLICY = WebhookPolicy(allow_private=True, settle_s=0, connect_timeout_s=2.0, timeout_s=5.0)


# ------------------------------------------------------------------------------------------ verifiers


def python_verifies(secret: str, request: Received) -> bool:
    try:
        Webhook(secret).verify(request.body, request.headers)
    except WebhookVerificationError:
        return False
    return True


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"`{name}` is not on PATH: these tests need Node.js 20 with npm", pytrace=False)
    return found


def _node_verifier() -> Path:
    """The node verifier with its packages, `npm ci` once per lockfile under `.cache/` (ignored by git);
    installed in a staging folder renamed into place, so concurrent runs never share a partial install."""
    lock = (NODE_PACKAGE / "package-lock.json").read_bytes()
    digest = hashlib.sha256(lock + (NODE_PACKAGE / "verify.mjs").read_bytes()).hexdigest()[:12]
    folder = NODE_CACHE / digest
    if (folder / ".complete").exists():
        return folder
    NODE_CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=NODE_CACHE))
    try:
        for name in ("package.json", "package-lock.json", "verify.mjs"):
            shutil.copyfile(NODE_PACKAGE / name, staging / name)
        done = subprocess.run(
            [_tool("npm"), "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel", "error"],
            cwd=staging,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
        (staging / ".complete").write_text("npm ci done\n")
        with contextlib.suppress(OSError):  # another run finished the same install first: use that one
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    assert (folder / ".complete").exists(), f"no complete install in {folder}"
    return folder


@pytest.fixture(scope="module")
def node_verifier() -> Path:
    return _node_verifier()


def node_verdicts(verifier: Path, cases: Sequence[tuple[str, Received]]) -> list[str]:
    """What the npm `standardwebhooks` package says of each (secret, request): "ok" or "fail: ...". One
    node process for every case."""
    lines = "".join(
        json.dumps({"secret": secret, "headers": request.headers, "body": request.body.decode()}) + "\n"
        for secret, request in cases
    )
    done = subprocess.run(
        [_tool("node"), str(verifier / "verify.mjs")],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "NODE_NO_WARNINGS": "1"},
    )
    assert done.returncode == 0, done.stderr
    verdicts = done.stdout.splitlines()
    assert len(verdicts) == len(cases), done.stdout
    return verdicts


# ------------------------------------------------------------------------------------------ the API


@dataclass
class Tenant:
    client: TestClient
    db: Engine
    key: str
    name: str

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.client.request(method, path, headers={"Authorization": f"Bearer {self.key}"}, **kwargs)

    def ok(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self.call(method, path, **kwargs)
        assert response.status_code < 300, response.text
        found: dict[str, Any] = response.json()
        return found

    def turn(self, thread: str = "t") -> None:
        body = {"messages": [{"id": uuid.uuid4().hex[:8], "role": "user", "text": "hi"}], "resource_id": "r"}
        self.ok("POST", f"/v1/threads/{thread}/turns", json=body)


@pytest.fixture(scope="module")
def client(pg_engine: Engine) -> Iterator[TestClient]:
    settings = ApiSettings(
        database_url=pg_engine.url.render_as_string(hide_password=False),
        auth="keys",
        executor="inline",
        model="om-local/extractive",
        webhook_allow_private=True,
    )
    with TestClient(create_app(settings)) as served:
        yield served


@pytest.fixture
def tenant(client: TestClient, pg_engine: Engine) -> Iterator[Tenant]:
    name = f"wh-sig-{uuid.uuid4().hex[:8]}"
    try:
        yield Tenant(client, pg_engine, access.create_key(pg_engine, name, "k").secret, name)
    finally:
        for endpoint in store.list_for(pg_engine, name, limit=1000, after=None):
            store.remove(pg_engine, endpoint.id, name)


@pytest.fixture
def receiver() -> Iterator[Listener]:
    with listening() as listener:
        yield listener


def delivered(tenant: Tenant, endpoint_id: str, receiver: Listener) -> list[Received]:
    """A turn, then one delivery run: the requests that run made."""
    before = len(receiver.received)
    tenant.turn()
    report = deliver_endpoint(tenant.db, endpoint_id, POLICY, clock=lambda: datetime.now(UTC))
    assert report.delivered >= 1 and not report.failed, tenant.ok(
        "GET", f"/v1/webhooks/{endpoint_id}/deliveries"
    )
    requests = receiver.received[before:]
    assert len(requests) == report.delivered
    return requests


def header(request: Received, name: str) -> str | None:
    return request.header(name)


# ------------------------------------------------------------------------------------------ the tests


def test_deliveries_verify_with_both_libraries_before_and_after_a_rotation(
    tenant: Tenant, receiver: Listener, node_verifier: Path
) -> None:
    created = tenant.ok("POST", "/v1/webhooks", json={"url": receiver.url + "/hook", "events": ["*"]})
    first_secret = created["secret"]
    assert first_secret.startswith("whsec_") and len(Webhook(first_secret)._whsecret) == 32
    assert created["legacy_signature"] is False and created["previous_secret_expires_at"] is None

    before = delivered(tenant, created["id"], receiver)
    for request in before:
        event = json.loads(request.body)
        assert header(request, "webhook-id") == f"evt_{event['id']}"
        assert header(request, SIGNATURE_HEADER) is None, "a new endpoint gets no deprecated header"
        assert len((header(request, "webhook-signature") or "").split(" ")) == 1
        assert python_verifies(first_secret, request)
        assert not python_verifies("whsec_" + "A" * 44, request), "another secret must not verify"

    rotated = tenant.ok("POST", f"/v1/webhooks/{created['id']}/rotate-secret", json={"keep_previous_s": 3600})
    second_secret = rotated["secret"]
    assert second_secret != first_secret and second_secret.startswith("whsec_")
    expires = datetime.fromisoformat(rotated["previous_secret_expires_at"])
    assert timedelta(minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=1)
    assert "secret" not in tenant.ok("GET", f"/v1/webhooks/{created['id']}")

    during = delivered(tenant, created["id"], receiver)
    for request in during:
        assert len((header(request, "webhook-signature") or "").split(" ")) == 2
        assert python_verifies(first_secret, request), "the receiver not yet updated keeps verifying"
        assert python_verifies(second_secret, request), "the updated receiver verifies"

    info = tenant.ok("DELETE", f"/v1/webhooks/{created['id']}/previous-secret")
    assert info["previous_secret_expires_at"] is None
    after = delivered(tenant, created["id"], receiver)
    for request in after:
        assert python_verifies(second_secret, request)
        assert not python_verifies(first_secret, request), "the dropped secret no longer verifies"

    cases = (
        [(first_secret, r) for r in before]
        + [(s, r) for r in during for s in (first_secret, second_secret)]
        + [(second_secret, r) for r in after]
    )
    assert node_verdicts(node_verifier, cases) == ["ok"] * len(cases)
    refused = node_verdicts(node_verifier, [(first_secret, after[0]), (second_secret, before[0])])
    assert all(verdict.startswith("fail") for verdict in refused), refused


def test_a_rotation_overlap_ends_when_it_expires(tenant: Tenant, receiver: Listener) -> None:
    created = tenant.ok("POST", "/v1/webhooks", json={"url": receiver.url + "/hook", "events": ["*"]})
    # Rotated two days ago with a one-day overlap: the previous secret has expired.
    rotated = store.rotate_secret(
        tenant.db,
        created["id"],
        tenant.name,
        keep_previous_s=86_400,
        now=datetime.now(UTC) - timedelta(days=2),
    )
    assert rotated is not None and rotated.previous_secret == created["secret"]
    assert tenant.ok("GET", f"/v1/webhooks/{created['id']}")["previous_secret_expires_at"] is None
    for request in delivered(tenant, created["id"], receiver):
        assert len((header(request, "webhook-signature") or "").split(" ")) == 1
        assert python_verifies(rotated.secret, request)
        assert not python_verifies(created["secret"], request)


def test_a_legacy_endpoint_gets_both_schemes_and_its_old_secret_verifies_either(
    tenant: Tenant, receiver: Listener, node_verifier: Path
) -> None:
    created = tenant.ok("POST", "/v1/webhooks", json={"url": receiver.url + "/hook", "events": ["*"]})
    # What migration 0010 leaves of an endpoint registered before: its hex secret, the legacy flag on.
    old_secret = "whsec_" + uuid.uuid4().hex + uuid.uuid4().hex[:16]
    W = schema.webhook_endpoints
    with tenant.db.begin() as conn:
        conn.execute(
            update(W).where(W.c.id == created["id"]).values(secret=old_secret, legacy_signature=True)
        )
    assert tenant.ok("GET", f"/v1/webhooks/{created['id']}")["legacy_signature"] is True

    requests = delivered(tenant, created["id"], receiver)
    for request in requests:
        legacy = header(request, SIGNATURE_HEADER)
        assert legacy is not None and verify(old_secret, legacy, request.body), "the old receiver verifies"
        assert python_verifies(old_secret, request), "and may move to the library with the same secret"
    assert node_verdicts(node_verifier, [(old_secret, r) for r in requests]) == ["ok"] * len(requests)

    patched = tenant.ok("PATCH", f"/v1/webhooks/{created['id']}", json={"legacy_signature": False})
    assert patched["legacy_signature"] is False
    for request in delivered(tenant, created["id"], receiver):
        assert header(request, SIGNATURE_HEADER) is None
        assert python_verifies(old_secret, request)


def test_another_tenant_cannot_rotate_or_drop_and_bounds_are_enforced(
    tenant: Tenant, client: TestClient, pg_engine: Engine, receiver: Listener
) -> None:
    created = tenant.ok("POST", "/v1/webhooks", json={"url": receiver.url + "/hook", "events": ["*"]})
    other = Tenant(client, pg_engine, access.create_key(pg_engine, tenant.name + "-x", "k").secret, "x")
    for method, path in (("POST", "rotate-secret"), ("DELETE", "previous-secret")):
        refused = other.call(method, f"/v1/webhooks/{created['id']}/{path}")
        assert refused.status_code == 404, refused.text
    unchanged = store.get(pg_engine, created["id"], tenant_id=tenant.name)
    assert (
        unchanged is not None and unchanged.secret == created["secret"] and unchanged.previous_secret is None
    )

    too_long = tenant.call(
        "POST", f"/v1/webhooks/{created['id']}/rotate-secret", json={"keep_previous_s": 10**9}
    )
    assert too_long.status_code == 422 and "keep_previous_s" in too_long.text, too_long.text
    bad_flag = tenant.call("PATCH", f"/v1/webhooks/{created['id']}", json={"legacy_signature": "yes"})
    assert bad_flag.status_code == 422, bad_flag.text

    # No body: the default overlap of one day.
    rotated = tenant.ok("POST", f"/v1/webhooks/{created['id']}/rotate-secret")
    expires = datetime.fromisoformat(rotated["previous_secret_expires_at"])
    assert timedelta(hours=23) < expires - datetime.now(UTC) <= timedelta(days=1)


def test_the_guides_receiving_examples_accept_real_deliveries(
    tenant: Tenant, receiver: Listener, node_verifier: Path, tmp_path: Path
) -> None:
    (python_example,) = [text for _, text in fenced("python") if "from standardwebhooks import" in text]
    (js_example,) = [text for _, text in fenced("js") if "standardwebhooks" in text]
    scope: dict[str, Any] = {}
    exec(python_example, scope)
    receive = scope["receive"]

    created = tenant.ok("POST", "/v1/webhooks", json={"url": receiver.url + "/hook", "events": ["*"]})
    rotated = tenant.ok("POST", f"/v1/webhooks/{created['id']}/rotate-secret")
    requests = delivered(tenant, created["id"], receiver)
    wrong = "whsec_" + "B" * 44
    for request in requests:
        for secret in (created["secret"], rotated["secret"]):
            assert receive(secret, request.headers, request.body) == json.loads(request.body)
        assert receive(wrong, request.headers, request.body) is None

    # The JavaScript example, as a module next to the installed package, called for each case.
    folder = Path(tempfile.mkdtemp(prefix="guide-", dir=node_verifier))
    try:
        (folder / "receive.mjs").write_text(js_example)
        (folder / "run.mjs").write_text(
            'import { receive } from "./receive.mjs";\n'
            'import { readFileSync } from "node:fs";\n'
            'for (const line of readFileSync(0, "utf8").split("\\n").filter(Boolean)) {\n'
            "  const { secret, headers, body } = JSON.parse(line);\n"
            "  let answer;\n"
            "  try { answer = JSON.stringify(receive(secret, headers, body)); }\n"
            '  catch { answer = "refused"; }\n'
            "  console.log(answer);\n"
            "}\n"
        )
        cases = [(created["secret"], r) for r in requests] + [
            (rotated["secret"], requests[0]),
            (wrong, requests[0]),
        ]
        lines = "".join(
            json.dumps({"secret": s, "headers": r.headers, "body": r.body.decode()}) + "\n" for s, r in cases
        )
        done = subprocess.run(
            [_tool("node"), str(folder / "run.mjs")],
            input=lines,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        answers = done.stdout.splitlines()
        expected = [json.loads(r.body) for _, r in cases[:-1]]
        assert [json.loads(a) for a in answers[:-1]] == expected and answers[-1] == "refused", done.stdout
    finally:
        shutil.rmtree(folder, ignore_errors=True)
