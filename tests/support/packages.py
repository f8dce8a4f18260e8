"""The server's packages, for the tests that read every one of their sources (the module map, the sinks,
where task names and JSON Schema validators may appear): a package added here is covered by all of them."""

from __future__ import annotations

#: Every package of the server distribution except `om_client` (the standalone client, tested on its own).
SERVER_PACKAGES = ("om_core", "om_local", "om_adapters", "om_api", "om_workers", "om_app")
