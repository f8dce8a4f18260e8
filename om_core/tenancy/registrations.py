"""Operator code that tenants reach by name: which tenants each registration serves.

A tenant key never names code to import; it names something the operator registered from a plugin module
(`OM_PLUGINS`): a Python extractor (`use`), an `onExtracted` callback, hooks. Each registration serves
every tenant (`tenants=None`) or only the tenants it lists. A tenant sees the registrations for every
tenant plus its own, and nothing else: a name registered only for another tenant answers exactly like a
name nobody registered. Without tenancy (the embedded mode without auth, tenant None) only the
registrations for every tenant apply.

The tenant of a run or an event comes from its stored thread id (`om_core.tenancy.scoped_ids.tenant_of`).
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Generic, TypeVar

__all__ = ["Audience", "NamedRegistry", "Tenants", "audience", "serves"]

#: Whom a registration serves, as an operator writes it: None for every tenant, else tenant ids.
Tenants = Collection[str] | None
#: The same, normalised: None for every tenant, else a non-empty frozen set of tenant ids.
Audience = frozenset[str] | None

T = TypeVar("T")


def audience(tenants: Tenants) -> Audience:
    """`tenants` normalised. A bare string is refused rather than read as a set of one-letter tenants, and
    an empty collection would register something nobody can reach: both are an operator's mistake."""
    if tenants is None:
        return None
    if isinstance(tenants, str):
        raise TypeError(f"tenants is a collection of tenant ids: write tenants={{{tenants!r}}}")
    chosen = frozenset(tenants)
    if not chosen or not all(isinstance(t, str) and t for t in chosen):
        raise ValueError("tenants lists at least one tenant id (non-empty strings); None means every tenant")
    return chosen


def serves(scope: Audience, tenant: str | None) -> bool:
    """Whether a registration for `scope` applies to `tenant` (None: no tenancy, global ones only)."""
    return scope is None or (tenant is not None and tenant in scope)


def _overlap(a: Audience, b: Audience) -> bool:
    return a is None or b is None or bool(a & b)


class NamedRegistry(Generic[T]):
    """Items by name, each serving every tenant or some. Two different items under one name may coexist
    only for tenants that do not overlap, so a lookup never has two candidates: two plugins fighting over a
    name fail at import, where the operator sees it, not at some tenant's run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, list[tuple[T, Audience]]] = {}

    def add(self, name: str, item: T, tenants: Tenants = None) -> T | None:
        """Register `item` as `name` for `tenants`; returns the different item that already holds the name
        for some of these tenants (and registers nothing then), else None."""
        scope = audience(tenants)
        with self._lock:
            entries = self._items.setdefault(name, [])
            for known, known_scope in entries:
                if known != item and _overlap(known_scope, scope):
                    return known
            if (item, scope) not in entries:
                entries.append((item, scope))
        return None

    def get(self, name: str, tenant: str | None) -> T | None:
        """The item `name` stands for, for `tenant`; None when no registration serving it has that name."""
        with self._lock:
            for item, scope in self._items.get(name, ()):
                if serves(scope, tenant):
                    return item
        return None

    def remove(self, name: str) -> None:
        """Forget every registration of `name` (tests, a plugin reloaded)."""
        with self._lock:
            self._items.pop(name, None)
