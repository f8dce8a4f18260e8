"""The Celery shell: the workers, beat and their metrics (the Redis and Celery adapters are `om_adapters`).

`om_core` is imported first, whatever module of this package a process starts from: it pins litellm to its
local price table before anything here can import litellm.
"""

import om_core  # noqa: F401
