"""Extractor code the operator registers from plugin modules (`OM_PLUGINS`), which a tenant's JSON
configuration refers to by name only: a Python extractor as `{"use": "<name>"}`, an `on_extracted`
callback as `"onExtracted": "<name>"`. Nothing a tenant writes is ever imported.

A Python extractor can do what JSON cannot: a pydantic model as its schema, callables of the run context
for its instructions or schema, an `on_extracted` function. A callback lets a JSON extractor written by a
tenant hand its value to operator code. A plugin module registers them at import time:

    from om_core.extractors.registry import register, register_callback
    register(Extractor(name="User profile", instructions=..., schema=Profile))
    register_callback("mark-done", lambda ctx: "DONE", tenants={"acme"})

`tenants=None` (the default) serves every tenant; a collection of tenant ids serves only those, and for
every other tenant the name does not exist (`om_core.tenancy.registrations`). Every process that runs cycles
(the API with the inline executor, workers) must import the same plugins. The API imports them too
(`om_api.runtime.import_plugins`), so where a tenant writes its config every name in it is resolved for
that tenant against the registrations the cycles will use (`check_tenant_overrides`): an import path, a
name nobody registered and a name registered only for another tenant are refused alike, with the field to
fix (the API's 422).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from om_core.extractors.definition import (
    CALLBACK_NAME_RE,
    Callback,
    Extractor,
    ExtractorError,
    parse_list,
    slugify,
)
from om_core.tenancy.registrations import NamedRegistry, Tenants

__all__ = [
    "CALLBACK_NAME_RE",
    "Callback",
    "check_tenant_overrides",
    "register",
    "register_callback",
    "registered",
    "registered_callback",
    "unregister",
    "unregister_callback",
]

_extractors: NamedRegistry[Extractor] = NamedRegistry()
_callbacks: NamedRegistry[Callback] = NamedRegistry()


def register(extractor: Extractor, *, tenants: Tenants = None) -> Extractor:
    """Make `extractor` usable as `{"use": <its name or slug>}` by `tenants` (None: every tenant).
    Registering the slug again with a different definition for an overlapping set of tenants is refused
    (two plugins would silently fight over it)."""
    if extractor.refusal is not None:
        raise ValueError("a refused extractor stands for a config entry that cannot run; never registered")
    known = _extractors.add(extractor.slug, extractor, tenants)
    if known is not None:
        raise ExtractorError(
            "EXTRACTOR_DUPLICATE_SLUG",
            "extractor.name",
            f"a different extractor is already registered with the slug {extractor.slug!r} for some of "
            "these tenants",
            extractor.name,
        )
    return extractor


def registered(name: str, tenant: str | None = None) -> Extractor | None:
    """The extractor registered with this name or slug for `tenant` (None: registrations for every
    tenant only)."""
    return _extractors.get(name, tenant) or _extractors.get(slugify(name), tenant)


def unregister(name: str) -> None:
    """Forget every registration of an extractor (tests)."""
    _extractors.remove(slugify(name))


def register_callback(name: str, callback: Callback, *, tenants: Tenants = None) -> Callback:
    """Make `callback` the `on_extracted` of any JSON extractor of `tenants` (None: every tenant) that
    says `"onExtracted": name`. It receives an `ExtractedContext`; its return value replaces the
    extracted value (None keeps it), and a raise drops the value with a failure the tenant sees in
    `extractionFailures` (its message included: raise messages meant for the tenant). Returns `callback`,
    so it can decorate."""
    if not isinstance(name, str) or not CALLBACK_NAME_RE.match(name):
        raise ValueError(
            f"callback name {name!r}: use lower-case letters, digits, '-' and '_', starting with a letter "
            "(at most 64 characters), e.g. 'mark-done'"
        )
    if not callable(callback):
        raise TypeError(f"callback {name!r} is not callable")
    known = _callbacks.add(name, callback, tenants)
    if known is not None:
        raise ValueError(
            f"a different onExtracted callback is already registered as {name!r} for some of these tenants"
        )
    return callback


def registered_callback(name: str, tenant: str | None = None) -> Callback | None:
    """The callback registered as `name` for `tenant` (None: registrations for every tenant only)."""
    return _callbacks.get(name, tenant)


def unregister_callback(name: str) -> None:
    """Forget every registration of a callback (tests)."""
    _callbacks.remove(name)


#: The config blocks holding extractor lists (`<block>.extract`).
_EXTRACT_BLOCKS = ("observation", "reflection")


def check_tenant_overrides(overrides: Mapping[str, Any] | None, tenant: str | None) -> None:
    """Raise `ExtractorError` (an `OMConfigError` naming e.g. `observation.extract[0].onExtracted`) when an
    extractor entry of `overrides` names code not registered for `tenant` (None: no tenancy, registrations
    for every tenant only). Call it with overrides the config model already accepted; only the entries
    being written are checked, not the operator's own config beneath them."""
    if not overrides:
        return
    for block in _EXTRACT_BLOCKS:
        options = overrides.get(block)
        entries = options.get("extract") if isinstance(options, Mapping) else None
        if isinstance(entries, list):
            parse_list(entries, field=f"{block}.extract", tenant=tenant)
