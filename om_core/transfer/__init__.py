"""Memory that moves in and out: a documented JSON Lines format (`records`), the export that streams a
thread, a resource or a tenant as that format (`export`), the import that writes it back into a tenant
idempotently (`importer`), and the reader of the original's storage (`mastra`, `sqlite_jsonb`) that turns
a Mastra database into the same records, so one importer serves both.

Import the modules directly; the package re-exports nothing.
"""
