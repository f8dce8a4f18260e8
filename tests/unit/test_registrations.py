"""Operator registrations by name, per tenant (`om_core.tenancy.registrations`, the extractor and callback
registries, hooks): who sees what, what the operator is refused, and how a stored id names its tenant."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from om_core.extractors import registry
from om_core.extractors.definition import CALLBACK_NAME_RE, ExtractedContext, Extractor, ExtractorError
from om_core.extractors.registry import check_tenant_overrides
from om_core.hooks import ObserveHooks, event_tenant, hooks_for, register_hooks, unregister_hooks
from om_core.store.types import StoredEvent
from om_core.tenancy.registrations import NamedRegistry, audience, serves
from om_core.tenancy.scoped_ids import scoped_id, tenant_of


def test_a_stored_id_names_its_tenant_even_when_the_tenant_holds_the_separator() -> None:
    assert tenant_of(scoped_id("acme", "t1")) == "acme"
    assert tenant_of(scoped_id("org/acme", "t1")) == "org/acme"
    assert tenant_of("t1") is None, "stored without tenancy"


def test_a_tenant_sees_registrations_for_everyone_and_its_own_only() -> None:
    names: NamedRegistry[str] = NamedRegistry()
    assert names.add("shared", "for everyone") is None
    assert names.add("mine", "acme's", {"acme"}) is None
    assert names.add("mine", "globex's", {"globex"}) is None, "the same name for tenants that do not overlap"
    assert names.get("shared", "acme") == names.get("shared", None) == "for everyone"
    assert names.get("mine", "acme") == "acme's" and names.get("mine", "globex") == "globex's"
    assert names.get("mine", "initech") is None and names.get("mine", None) is None
    assert names.add("mine", "a third", {"globex", "hooli"}) == "globex's", "overlap: refused, nothing added"
    assert names.get("mine", "hooli") is None
    assert names.add("shared", "another", {"hooli"}) == "for everyone"
    assert names.add("mine", "acme's", {"acme"}) is None, "registering the same thing again is harmless"
    names.remove("mine")
    assert names.get("mine", "acme") is None


def test_an_audience_is_a_set_of_tenant_ids_or_everyone() -> None:
    assert audience(None) is None and audience(["a", "b"]) == frozenset({"a", "b"})
    with pytest.raises(TypeError, match="tenants=\\{'acme'\\}"):
        audience("acme")
    with pytest.raises(ValueError):
        audience([])
    assert serves(None, None) and serves(frozenset({"a"}), "a")
    assert not serves(frozenset({"a"}), None) and not serves(frozenset({"a"}), "b")


@pytest.fixture
def registered() -> Iterator[None]:
    registry.register_callback("upper", lambda ctx: str(ctx.current).upper(), tenants={"acme"})
    registry.register(Extractor(name="Mood", instructions="The mood."), tenants={"acme"})
    try:
        yield
    finally:
        registry.unregister_callback("upper")
        registry.unregister("Mood")


@pytest.mark.parametrize(
    "name", ["module:function", "pkg.mod.fn", "builtins:repr", "Upper", "1st", "a b", "x" * 65, ""]
)
def test_a_callback_name_is_never_an_import_path(name: str) -> None:
    assert not CALLBACK_NAME_RE.match(name)
    with pytest.raises(ValueError, match="lower-case letters"):
        registry.register_callback(name, lambda ctx: None)


def test_registries_refuse_what_two_plugins_would_fight_over(registered: None) -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register_callback("upper", lambda ctx: None)
    with pytest.raises(ExtractorError) as caught:
        registry.register(Extractor(name="mood", instructions="Another mood."), tenants={"acme", "globex"})
    assert caught.value.code == "EXTRACTOR_DUPLICATE_SLUG"
    with pytest.raises(TypeError):
        registry.register_callback("not-callable", "builtins:repr")  # type: ignore[arg-type]


def test_written_overrides_name_only_what_serves_their_tenant(registered: None) -> None:
    overrides = {
        "observation": {"extract": [{"name": "drink", "instructions": "x", "onExtracted": "upper"}]},
        "reflection": {"extract": [{"use": "mood"}]},
    }
    check_tenant_overrides(overrides, "acme")
    check_tenant_overrides({"enabled": False}, "globex")
    check_tenant_overrides(None, "globex")
    with pytest.raises(ExtractorError) as caught:
        check_tenant_overrides(overrides, "globex")
    assert caught.value.field == "observation.extract[0].onExtracted"
    assert caught.value.code == "EXTRACTOR_HOOK_NOT_REGISTERED"
    with pytest.raises(ExtractorError) as caught:
        check_tenant_overrides({"reflection": overrides["reflection"]}, None)
    assert (caught.value.field, caught.value.code) == (
        "reflection.extract[0].use",
        "EXTRACTOR_NOT_REGISTERED",
    )
    path = {"observation": {"extract": [{"name": "d", "instructions": "x", "onExtracted": "os:system"}]}}
    with pytest.raises(ExtractorError) as caught:
        check_tenant_overrides(path, "acme")
    assert caught.value.code == "EXTRACTOR_INVALID_HOOK" and "register_callback" in str(caught.value)


def test_a_resolved_callback_is_the_registered_function(registered: None) -> None:
    from om_core.extractors.definition import from_json

    entry = {"name": "drink", "instructions": "x", "onExtracted": "upper"}
    extractor = from_json(entry, field="observation.extract[0]", tenant="acme")
    assert extractor.on_extracted is not None
    context = ExtractedContext("observer", extractor, None, None, None, "tea")
    assert extractor.on_extracted(context) == "TEA"
    shape_only = from_json(entry, field="f", tenant="globex", resolve_names=False)
    assert shape_only.on_extracted is None and shape_only.refusal is None


class _Hooks(ObserveHooks):
    pass


def _event(thread_id: str | None, lookup_key: str) -> StoredEvent:
    return StoredEvent(1, "data-om-observation-end", thread_id, lookup_key, None, "c1", {}, datetime.now(UTC))


def test_hooks_for_a_tenant_and_the_tenant_of_an_event() -> None:
    everyone, acme = _Hooks(), _Hooks()
    register_hooks(everyone)
    register_hooks(acme, tenants={"acme"})
    try:
        assert everyone in hooks_for("acme") and acme in hooks_for("acme")
        assert everyone in hooks_for("globex") and acme not in hooks_for("globex")
        assert acme not in hooks_for(None), "without tenancy only hooks for every tenant run"
    finally:
        unregister_hooks(everyone)
        unregister_hooks(acme)
    assert acme not in hooks_for("acme")
    stored = scoped_id("acme", "t1")
    assert event_tenant(_event(stored, f"thread:{stored}")) == "acme"
    assert event_tenant(_event(None, f"resource:{scoped_id('acme', 'u1')}")) == "acme"
    assert event_tenant(_event("t1", "thread:t1")) is None
