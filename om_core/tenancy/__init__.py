"""Tenants: who may see what, what they may write, and the operator's limits on them.

- `scoped_ids`     stored ids `<tenant>/<id>`: a tenant's thread and resource ids are its own;
- `access`         API keys (hashed) and thread ownership, checked as a second wall behind scoped ids;
- `limits`         the operator's per-tenant limits (`om tenants limits`);
- `spend`          a tenant's memory-model spend today against its daily budget;
- `json_schema`    the JSON Schemas a tenant writes, handled as data;
- `registrations`  operator code a tenant reaches by name (extractors, callbacks, hooks), per tenant.

Import the modules directly; the package re-exports nothing (`scoped_ids` is imported by storage's
schema, so nothing here may run on import).
"""
