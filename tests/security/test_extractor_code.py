"""A tenant never names code (issue 28 item 2), tried as an attacker holding one ordinary tenant key.

The real API app (keys auth, inline executor, the offline model `om-local/extractive`, SQLite) with the
operator's plugin module loaded through `OM_PLUGINS`, the way `om serve` loads it. `onExtracted` once took
`module:function` and imported it: a canary module on `sys.path` records its own import, so "never
imported" is observed, not assumed. It must not run when the tenant writes it (422 naming the field) nor
when an old config holding it is already in the database (the entry is refused at use and reported in
`extractionFailures`, and the turn goes on). What the operator registered runs by name, for the tenants it
was registered for only; another tenant cannot tell it from a name nobody registered. A callback that
raises, `SystemExit` included, is its extractor's failure and never the request's. Hooks registered for a
tenant see that tenant's cycles only.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, update
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.engine import events as ev
from om_core.extractors import registry
from om_core.hooks import DISPATCHER, HookContext, ObserveHooks, register_hooks, unregister_hooks
from om_core.store import schema
from om_core.store.outbox import list_events
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.workers import wait_until

#: Observation in the turn once a few messages are in (no buffering).
OBSERVE = {"messageTokens": 400, "bufferTokens": False}
#: What the offline Observer writes for an extractor about drinks (the user's sentence naming one).
DRINK = "My favorite drink is green tea with honey."
ONE_CYCLE_S = 120.0


def _hex() -> str:
    return uuid.uuid4().hex[:10]


@dataclass
class Attack:
    """The app, its database, two tenants' keys, and the names of what the operator registered."""

    client: TestClient
    db: Engine
    db_path: str
    tenant: str
    key: str
    other_tenant: str
    other_key: str
    #: callback names: for every tenant, for `tenant` only, one raising, one calling sys.exit.
    shout: str
    mine: str
    explode: str
    leave: str
    #: a Python extractor registered for `tenant` only.
    private_extractor: str
    canary_module: str
    canary_marker: Path

    def call(self, method: str, path: str, *, other: bool = False, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.other_key if other else self.key}"}
        return self.client.request(method, path, headers=headers, **kwargs)

    def put_config(self, thread: str, observation: dict[str, Any], *, other: bool = False) -> Any:
        body = {"overrides": {"observation": {**OBSERVE, **observation}}, "resource_id": f"u-{thread}"}
        return self.call("PUT", f"/v1/threads/{thread}/config", other=other, json=body)

    def talk(self, thread: str, *, other: bool = False) -> list[dict[str, Any]]:
        """Turns until the thread's observation ends; every turn must answer 200. The observation end
        events' payloads."""
        tenant = self.other_tenant if other else self.tenant
        stored = scoped_id(tenant, thread)
        for i in range(8):
            text = f"{DRINK} " + " ".join(f"harbor{i * 7 + k}" for k in range(40))
            message = {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "text": text}
            body = {"messages": [message], "resource_id": f"u-{thread}"}
            answer = self.call("POST", f"/v1/threads/{thread}/turns", other=other, json=body)
            assert answer.status_code == 200, answer.text
        return wait_until(
            lambda: [
                e.payload
                for e in list_events(self.db, thread_id=stored, limit=10_000)
                if e.type == ev.OBSERVATION_END
            ],
            deadline_s=ONE_CYCLE_S,
            what=f"an observation of {thread}",
        )

    def canary_ran(self) -> bool:
        return self.canary_marker.exists() or self.canary_module in sys.modules


def _write_plugin(directory: Path, name: str, tenant: str, names: dict[str, str]) -> None:
    """The operator's plugin module, as `OM_PLUGINS` names it."""
    source = f"""
        from om_core.extractors.definition import Extractor
        from om_core.extractors.registry import register, register_callback

        def shout(ctx):
            return str(ctx.current).upper()

        def explode(ctx):
            raise RuntimeError("the CRM is down")

        def leave(ctx):
            raise SystemExit(3)

        register_callback({names["shout"]!r}, shout)
        register_callback({names["mine"]!r}, shout, tenants={{{tenant!r}}})
        register_callback({names["explode"]!r}, explode)
        register_callback({names["leave"]!r}, leave)
        register(
            Extractor(name={names["private_extractor"]!r}, instructions="The drink the user prefers."),
            tenants={{{tenant!r}}},
        )
    """
    (directory / f"{name}.py").write_text(textwrap.dedent(source))


def _write_canary(directory: Path, name: str, marker: Path) -> None:
    """A module whose import, and whose function's call, leave a file behind."""
    source = f"""
        from pathlib import Path

        Path({str(marker)!r}).write_text("imported")

        def run(ctx):
            Path({str(marker)!r}).write_text("called")
            return "PWNED"
    """
    (directory / f"{name}.py").write_text(textwrap.dedent(source))


def _serve(db: Engine, directory: Path, plugin: str | None) -> Iterator[Attack]:
    """The app on the migrated SQLite database in `directory`, with `plugin` as `OM_PLUGINS`."""
    suffix = _hex()
    names = {
        "shout": f"shout-{suffix}",
        "mine": f"mine-{suffix}",
        "explode": f"explode-{suffix}",
        "leave": f"leave-{suffix}",
        "private_extractor": f"private-{suffix}",
    }
    tenant, other_tenant = f"acme-{suffix}", f"intruder-{suffix}"
    canary = f"om_canary_{suffix}"
    marker = directory / "canary-ran"
    if plugin is not None:
        _write_plugin(directory, plugin, tenant, names)
    _write_canary(directory, canary, marker)
    sys.path.insert(0, str(directory))
    db_path = str(directory / "om.db")  # `sqlite_engine` migrated it
    settings = ApiSettings(
        database_url=f"sqlite:///{db_path}",
        auth="keys",
        executor="inline",
        model="om-local/extractive",
        plugins=plugin,
    )
    try:
        with TestClient(create_app(settings)) as client:
            yield Attack(
                client,
                db,
                db_path,
                tenant,
                access.create_key(db, tenant, "victim").secret,
                other_tenant,
                access.create_key(db, other_tenant, "attacker").secret,
                canary_module=canary,
                canary_marker=marker,
                **names,
            )
    finally:
        sys.path.remove(str(directory))
        if plugin is not None:
            sys.modules.pop(plugin, None)
            for name in ("shout", "mine", "explode", "leave"):
                registry.unregister_callback(names[name])
            registry.unregister(names["private_extractor"])


@pytest.fixture
def attack(sqlite_engine: Engine, tmp_path: Path) -> Iterator[Attack]:
    """The server as an attacker meets it: no plugin needed to try an import path."""
    yield from _serve(sqlite_engine, tmp_path, None)


@pytest.fixture
def operated(sqlite_engine: Engine, tmp_path: Path) -> Iterator[Attack]:
    """The server with the operator's plugin module loaded through `OM_PLUGINS`."""
    yield from _serve(sqlite_engine, tmp_path, f"om_test_plugin_{_hex()}")


def _drink(on_extracted: str | None = None, name: str = "drink") -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "instructions": "The drink the user prefers."}
    if on_extracted is not None:
        entry["onExtracted"] = on_extracted
    return entry


def _failures(ends: list[dict[str, Any]]) -> dict[str, str]:
    return {f["slug"]: f["error"] for end in ends for f in end.get("extractionFailures", [])}


# ------------------------------------------------------------------------------ written by the tenant


def test_an_import_path_is_refused_where_the_config_is_written_and_nothing_is_imported(
    attack: Attack,
) -> None:
    targets = [
        f"{attack.canary_module}:run",
        f"{attack.canary_module}.run",
        "builtins:repr",
        "sys:exit",
        "sys:addaudithook",
        "os:system",
    ]
    for target in targets:
        thread = f"t-{_hex()}"
        answer = attack.put_config(thread, {"extract": [_drink(target)]})
        assert answer.status_code == 422, (target, answer.text)
        error = answer.json()["error"]
        assert error["field"] == "overrides.observation.extract[0].onExtracted", error
        assert "register_callback" in error["message"] and "OM_PLUGINS" in error["message"], error
        stored = attack.call("GET", f"/v1/threads/{thread}/config").json()
        assert target not in str(stored), "a refused config is not stored"

        resource = attack.call(
            "PUT",
            f"/v1/resources/r-{_hex()}/config",
            json={"overrides": {"reflection": {"extract": [_drink(target)]}}},
        )
        assert resource.status_code == 422, resource.text
        assert resource.json()["error"]["field"] == "overrides.reflection.extract[0].onExtracted"
    assert not attack.canary_ran(), "the canary module was imported"


def test_a_stored_import_path_is_never_imported_at_use_and_the_turn_goes_on(attack: Attack) -> None:
    """A config stored before names were required (written straight into the database) still resolves; its
    entries never run, each is reported as its extractor's failure, the other extractors are kept."""
    thread = f"t-{_hex()}"
    assert attack.put_config(thread, {"extract": [_drink()]}).status_code == 200
    planted = {
        "observation": {
            **OBSERVE,
            "extract": [
                _drink(f"{attack.canary_module}:run", name="canary"),
                _drink("builtins:repr", name="internals"),
                _drink("sys:exit", name="leave"),
                _drink(),
            ],
        }
    }
    with attack.db.begin() as conn:
        conn.execute(
            update(schema.threads)
            .where(schema.threads.c.id == scoped_id(attack.tenant, thread))
            .values(config_overrides=planted)
        )

    ends = attack.talk(thread)

    assert not attack.canary_ran(), "the canary module was imported"
    failures = _failures(ends)
    for slug in ("canary", "internals", "leave"):
        assert "EXTRACTOR_INVALID_HOOK" in failures.get(slug, ""), (slug, failures)
        assert "register_callback" in failures[slug]
    detail = attack.call("GET", f"/v1/threads/{thread}")
    assert detail.status_code == 200
    extracted = detail.json()["extracted"]
    assert set(extracted) == {"drink"} and DRINK in extracted["drink"], extracted
    assert attack.db_path not in detail.text and "Engine(" not in detail.text, "internals reached the tenant"
    assert attack.call("GET", "/healthz").status_code == 200


# ------------------------------------------------------------------------------ named registrations


def test_a_registered_callback_runs_by_name(operated: Attack) -> None:
    thread = f"t-{_hex()}"
    assert operated.put_config(thread, {"extract": [_drink(operated.shout)]}).status_code == 200
    ends = operated.talk(thread)
    assert not _failures(ends)
    value = operated.call("GET", f"/v1/threads/{thread}").json()["extracted"]["drink"]
    assert DRINK.upper() in value, "the callback's return value replaced the extracted one"


def test_a_registration_for_one_tenant_does_not_exist_for_another(operated: Attack) -> None:
    never = f"never-{_hex()}"

    def refusal(name: str, key: str) -> str:
        thread = f"t-{_hex()}"
        entry = {"use": name} if key == "use" else _drink(name)
        answer = operated.put_config(thread, {"extract": [entry]}, other=True)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["field"] == f"overrides.observation.extract[0].{key}", error
        return str(error["message"]).replace(name, "<name>")

    # Refused for the other tenant exactly as a name nobody registered.
    assert refusal(operated.mine, "onExtracted") == refusal(never, "onExtracted")
    assert refusal(operated.private_extractor, "use") == refusal(never, "use")

    # Its own tenant uses both.
    thread = f"t-{_hex()}"
    config = {"extract": [_drink(operated.mine), {"use": operated.private_extractor}]}
    assert operated.put_config(thread, config).status_code == 200, "the owner may name its registrations"
    operated.talk(thread)
    extracted = operated.call("GET", f"/v1/threads/{thread}").json()["extracted"]
    assert DRINK.upper() in extracted["drink"] and DRINK in extracted[operated.private_extractor]

    # Planted straight into the database for the other tenant: refused at use, the same way.
    theirs = f"t-{_hex()}"
    assert operated.put_config(theirs, {"extract": [_drink()]}, other=True).status_code == 200
    planted = {
        "observation": {**OBSERVE, "extract": [_drink(operated.mine), {"use": operated.private_extractor}]}
    }
    with operated.db.begin() as conn:
        conn.execute(
            update(schema.threads)
            .where(schema.threads.c.id == scoped_id(operated.other_tenant, theirs))
            .values(config_overrides=planted)
        )
    failures = _failures(operated.talk(theirs, other=True))
    assert "EXTRACTOR_HOOK_NOT_REGISTERED" in failures["drink"], failures
    assert "EXTRACTOR_NOT_REGISTERED" in failures[operated.private_extractor], failures
    assert operated.call("GET", f"/v1/threads/{theirs}", other=True).json()["extracted"] == {}


def test_a_raising_callback_is_its_extractors_reported_failure_and_the_turn_answers(operated: Attack) -> None:
    thread = f"t-{_hex()}"
    config = {
        "extract": [
            _drink(operated.explode, name="drink"),
            _drink(operated.leave, name="beverage"),
            _drink(name="favorite"),
        ]
    }
    assert operated.put_config(thread, config).status_code == 200
    failures = _failures(operated.talk(thread))
    assert failures == {"drink": "the CRM is down", "beverage": "onExtracted raised SystemExit"}, failures
    extracted = operated.call("GET", f"/v1/threads/{thread}").json()["extracted"]
    assert set(extracted) == {"favorite"}, "a failing callback drops only its own value"
    assert operated.call("GET", "/healthz").status_code == 200


# ------------------------------------------------------------------------------------------- hooks


class Recorder(ObserveHooks):
    def __init__(self) -> None:
        self.threads: list[str | None] = []

    def on_observation_end(self, ctx: HookContext) -> None:
        self.threads.append(ctx.thread_id)


def test_hooks_registered_for_a_tenant_see_only_that_tenants_cycles(operated: Attack) -> None:
    mine, everyone = Recorder(), Recorder()
    register_hooks(mine, tenants={operated.tenant})
    register_hooks(everyone)
    try:
        ours, theirs = f"t-{_hex()}", f"t-{_hex()}"
        assert operated.put_config(ours, {}).status_code == 200
        assert operated.put_config(theirs, {}, other=True).status_code == 200
        operated.talk(ours)
        operated.talk(theirs, other=True)
        assert DISPATCHER.drain(), "the hooks caught up"
    finally:
        unregister_hooks(mine)
        unregister_hooks(everyone)
    assert ours in mine.threads and theirs not in mine.threads, mine.threads
    assert {ours, theirs} <= set(everyone.threads), everyone.threads
