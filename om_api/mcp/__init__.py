"""The MCP server (issue 31): om's memory as MCP tools, for chat clients that speak the Model Context
Protocol.

- `tools.py`: the tools, their bounded arguments, and the backend interface that answers them;
- `in_process.py`: the backend behind `/mcp`, the API's route functions called as the key's tenant;
- `remote.py`: the backend behind `om mcp` (stdio), a server reached through the Python client;
- `serving.py`: the MCP SDK's server over streamable HTTP or stdio (the only module importing the SDK);
- `endpoint.py`: `/mcp` in the API, the key checked before the SDK is reached (and loaded).
"""
