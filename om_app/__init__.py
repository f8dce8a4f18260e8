"""The application layer: what needs both shells, so it sits above `om_api` and `om_workers`.

Here live the `om` command (`cli`, every subcommand wires settings to a process of one shell or the
other), `om up` and the supervisor that keeps its children running (`up`, `supervisor`), the embedded
stack the demo and the tests start (`embedded`), the demo and its sample conversation (`demo`,
`sample_conversation`) and the start-up checks the commands run first (`preflight`).

`om_core` sits below both shells and imports neither; the shells import the core and the Redis and Celery
adapters they share (`om_adapters`), and not each other (`[tool.importlinter]` in pyproject.toml, checked
by `make lint`). The `om` command starts the API and the
workers alike, so it cannot live in either shell, nor in the core they share: it lives here, and nothing
below imports it.
"""

import om_core  # noqa: F401  (first, as in both shells: it pins litellm to its local price table)
