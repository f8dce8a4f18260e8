"""Working memory: a small document of durable facts the actor sees on every turn.

- `document`   reading and writing it (schema, version check, event), the actor's messages and tool;
- `extractor`  the `working-memory` extractor, through which the Observer keeps it current.

Its rows are storage's (`om_core.store.working_memory`). Import the modules directly; the package
re-exports nothing.
"""
