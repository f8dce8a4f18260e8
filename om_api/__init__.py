"""The HTTP API shell (FastAPI): routes, auth, the proxy, the dashboard's files.

`om_core` is imported first, whatever module of this package a process starts from: it pins litellm to its
local price table before anything here can import litellm.
"""

import om_core  # noqa: F401
