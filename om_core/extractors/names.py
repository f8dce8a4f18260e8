"""Where a tenant writes its config, every name of operator code in it must resolve for that tenant.

A tenant's extractor entries name code only through `use` (a registered Python extractor) and
`onExtracted` (a registered callback). Resolving a config checks those names for their shape only (see
`definition`); this check resolves them for the tenant writing the config, in the process that writes it:
the API, which imports `OM_PLUGINS` like the workers do (`om_api.runtime.import_plugins`), so it holds the
registrations the cycles will use. An import path, a name nobody registered and a name registered only
for another tenant are refused alike, with the field to fix (the API's 422).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from om_core.extractors.definition import parse_list

__all__ = ["check_tenant_overrides"]

#: The config blocks holding extractor lists (`<block>.extract`).
_BLOCKS = ("observation", "reflection")


def check_tenant_overrides(overrides: Mapping[str, Any] | None, tenant: str | None) -> None:
    """Raise `ExtractorError` (an `OMConfigError` naming e.g. `observation.extract[0].onExtracted`) when an
    extractor entry of `overrides` names code not registered for `tenant` (None: no tenancy, registrations
    for every tenant only). Call it with overrides the config model already accepted; only the entries
    being written are checked, not the operator's own config beneath them."""
    if not overrides:
        return
    for block in _BLOCKS:
        options = overrides.get(block)
        entries = options.get("extract") if isinstance(options, Mapping) else None
        if isinstance(entries, list):
            parse_list(entries, field=f"{block}.extract", tenant=tenant)
