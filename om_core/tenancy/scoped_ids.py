"""Stored ids that include their tenant: two tenants may both name a thread `t1`.

A thread or resource id a tenant chooses (its *public* id) is stored as `<tenant>/<id>`. Every storage
row, Redis key, Celery task payload, outbox row and trigger uses the stored id, so nothing keyed by an id
can reach another tenant's data; what a client reads (event payloads, status, messages, views) carries the
public id again. A public id never contains `/` (the API's id pattern refuses it), so the last `/` splits a
stored id whatever the tenant's own name holds. Without tenancy (`tenant_id=None`, the embedded mode
without auth) ids are stored as given.

The two kinds are distinct types (`PublicId`, `StoredId`, both `str` at run time): a stored id sent where
a client reads a public one would leak the tenant's name, and a public id used as a key would reach the
wrong rows (or none), so mypy refuses to mix them and every conversion is one of the functions below.

Kept apart from `access` (keys, ownership) because event and status builders need it and import nothing
else of the store.
"""

from __future__ import annotations

from typing import NewType

__all__ = [
    "MAX_TENANT_LENGTH",
    "SCOPE_SEPARATOR",
    "PublicId",
    "StoredId",
    "public_id",
    "scoped_id",
    "tenant_of",
]

#: A thread or resource id as the tenant chose it and reads it back (never contains `/`).
PublicId = NewType("PublicId", str)
#: A thread or resource id as storage keys it: `<tenant>/<public id>`, or the public id without tenancy.
StoredId = NewType("StoredId", str)

#: Separates the tenant from the public id in a stored id. Public ids never contain it.
SCOPE_SEPARATOR = "/"
#: A tenant id's longest length, so that a stored id (tenant, separator, a public id of up to 255
#: characters) fits the id columns (`store.schema.ID_LENGTH`).
MAX_TENANT_LENGTH = 255


def scoped_id(tenant_id: str | None, public: PublicId) -> StoredId:
    """The stored id of a tenant's thread or resource."""
    return StoredId(public if tenant_id is None else f"{tenant_id}{SCOPE_SEPARATOR}{public}")


def public_id(stored: StoredId) -> PublicId:
    """The id the tenant chose, from a stored id (unchanged when it was stored without a tenant)."""
    return PublicId(stored.rpartition(SCOPE_SEPARATOR)[2])


def tenant_of(stored: StoredId) -> str | None:
    """The tenant a stored id belongs to (None when it was stored without a tenant). What code that only
    holds a stored id (an event, a run of extractors) uses to choose the operator registrations that
    serve the tenant (`om_core.tenancy.registrations`)."""
    tenant, separator, _ = stored.rpartition(SCOPE_SEPARATOR)
    return tenant if separator else None
