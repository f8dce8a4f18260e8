"""Python extractors registered by plugin modules (`OM_PLUGINS`), referenced from JSON configuration as
`{"use": "<name>"}`.

A Python extractor can do what JSON cannot: a pydantic model as its schema, callables of the run context
for its instructions or schema, an `on_extracted` function. A plugin module registers it at import time:

    from om_core.extractors.registry import register
    register(Extractor(name="User profile", instructions=..., schema=Profile))

Every process that runs cycles (API with the inline executor, workers) must import the same plugins.
"""

from __future__ import annotations

import threading

from om_core.extractors.definition import Extractor, ExtractorError

_lock = threading.Lock()
_registered: dict[str, Extractor] = {}


def register(extractor: Extractor) -> Extractor:
    """Make `extractor` usable as `{"use": <its name or slug>}`. Registering the same slug twice with a
    different definition is refused (two plugins would silently fight over it)."""
    with _lock:
        known = _registered.get(extractor.slug)
        if known is not None and known != extractor:
            raise ExtractorError(
                "EXTRACTOR_DUPLICATE_SLUG",
                "extractor.name",
                f"a different extractor is already registered with the slug {extractor.slug!r}",
                extractor.name,
            )
        _registered[extractor.slug] = extractor
    return extractor


def registered(name: str) -> Extractor | None:
    """The registered extractor with this name or slug."""
    from om_core.extractors.definition import slugify

    with _lock:
        return _registered.get(name) or _registered.get(slugify(name))


def unregister(name: str) -> None:
    """Forget a registration (tests)."""
    from om_core.extractors.definition import slugify

    with _lock:
        _registered.pop(slugify(name), None)
