"""Every place the server's code reaches a sink is listed here with what keeps tenant input out of it.

A sink is a call that sends a model request (litellm), a call that imports code by a computed name, a
module that builds JSON Schema validators, or a call that opens an outbound connection. The test reads the
source of every server package and finds each; a new one (or one that moved) fails the test until it is
added to `SINKS` with the reason a tenant's input cannot choose where it goes, so no door opens silently.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.packages import SERVER_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = SERVER_PACKAGES

#: litellm functions that send a request to a provider.
MODEL_CALLS = frozenset(
    {"completion", "acompletion", "embedding", "aembedding", "responses", "aresponses", "text_completion"}
)
#: Calls that import (and so run) a module whose name they are given.
IMPORTING_CALLS = frozenset(
    {"import_module", "__import__", "resolve_name", "locate", "run_module", "run_path"}
)
#: Modules whose import means the file builds or runs JSON Schema validators.
VALIDATOR_MODULES = ("jsonschema", "referencing")
#: Modules that open connections, and the calls of theirs that do.
CONNECTING = {
    "httpx": frozenset({"Client", "AsyncClient", "HTTPTransport", "get", "post", "put", "request", "stream"}),
    "socket": frozenset({"create_connection", "socket", "getaddrinfo"}),
    "urllib": frozenset({"urlopen"}),
    "http": frozenset({"HTTPConnection", "HTTPSConnection"}),
    "requests": frozenset({"get", "post", "put", "request", "Session"}),
}

#: (file, enclosing function, kind) -> why tenant input cannot choose where it goes.
SINKS: dict[tuple[str, str, str], str] = {
    ("om_core/models/client.py", "ModelClient._call_once", "model call"): (
        "memory-model completions: the model and kwargs come from a config checked by om_core.config.trust "
        "where written and used (EngineCore.complete); provider options only through routing's translations"
    ),
    ("om_core/models/client.py", "ModelClient.embed.attempt", "model call"): (
        "embeddings with OM_EMBEDDING_MODEL, a server setting; no request or config names it"
    ),
    ("om_api/proxy/chat_completions.py", "_Loop._acompletion", "model call"): (
        "the proxy's actor call: fields from FORWARDED_FIELDS only, the model allowed by OM_ACTOR_MODELS"
    ),
    (
        "om_core/__init__.py",
        "__getattr__",
        "import by name",
    ): "a public name of om_core, from its fixed table",
    ("om_core/store/db.py", "_optional", "import by name"): "optional drivers named in the code",
    ("om_core/store/db.py", "make_engine", "import by name"): "the standard library's sqlite3",
    ("om_api/runtime.py", "import_plugins", "import by name"): "OM_PLUGINS, an operator setting",
    ("om_core/tenancy/json_schema.py", "<module>", "schema validator"): (
        "the one module that validates tenant schemas: local references only, a registry that retrieves "
        "nothing, RE2 patterns, bounded size and work"
    ),
    ("om_core/webhooks/delivery.py", "_client", "outbound connection"): (
        "webhook deliveries: pinned to the address om_core.webhooks.targets checked (global only)"
    ),
    ("om_core/webhooks/targets.py", "resolve_host", "outbound connection"): (
        "the one DNS lookup of a webhook's host, whose every address is then checked"
    ),
    ("om_app/embedded.py", "wait_for_port", "outbound connection"): "the embedded stack's own loopback ports",
    ("om_app/embedded.py", "api_ready", "outbound connection"): "the embedded stack's own API, on loopback",
    ("om_app/embedded.py", "free_port", "outbound connection"): "binds a loopback socket to find a free port",
    ("om_app/up.py", "_port_free", "outbound connection"): "binds a loopback socket to test a port",
}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return f"{_dotted(node.func)}()"
    return "?"


def _call_kind(call: ast.Call) -> str | None:
    dotted = _dotted(call.func)
    root, last = dotted.split(".", 1)[0], dotted.rsplit(".", 1)[-1]
    if last in MODEL_CALLS and "litellm" in dotted:
        return "model call"
    if last in IMPORTING_CALLS:
        return "import by name"
    if "." in dotted and last in CONNECTING.get(root, frozenset()):
        return "outbound connection"
    return None


def _sinks_in(path: Path, root: Path = ROOT) -> Iterator[tuple[str, str, str]]:
    where = str(path.relative_to(root))

    def visit(node: ast.AST, scope: str) -> Iterator[tuple[str, str, str]]:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = f"{scope}.{child.name}" if scope else child.name
            if isinstance(child, ast.Call) and (kind := _call_kind(child)) is not None:
                yield where, scope or "<module>", kind
            if isinstance(child, ast.Import | ast.ImportFrom):
                names = (
                    [child.module or ""]
                    if isinstance(child, ast.ImportFrom)
                    else [a.name for a in child.names]
                )
                if any(name.split(".")[0] in VALIDATOR_MODULES for name in names):
                    yield where, "<module>", "schema validator"
            yield from visit(child, inner)

    yield from visit(ast.parse(path.read_text(), filename=str(path)), "")


def found() -> set[tuple[str, str, str]]:
    paths = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    return {sink for path in paths for sink in _sinks_in(path)}


def test_every_sink_is_listed_with_its_reason() -> None:
    sinks = found()
    assert ("om_core/models/client.py", "ModelClient._call_once", "model call") in sinks, "the scan works"
    assert sinks - set(SINKS) == set(), "new sinks: add each to SINKS with what keeps tenant input out"
    assert set(SINKS) - sinks == set(), "these sinks are gone: remove them from SINKS"


def test_the_scan_finds_each_kind_of_sink(tmp_path: Path) -> None:
    """Planted sinks of each kind are found, so an empty difference above means something."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import importlib\nimport httpx\nimport jsonschema\nimport litellm\n\n"
        "def door(name: str) -> None:\n"
        "    importlib.import_module(name)\n    httpx.post(name)\n    litellm.completion(model=name)\n"
    )
    sinks = set(_sinks_in(planted, tmp_path))
    assert {kind for _, _, kind in sinks} == {
        "model call",
        "import by name",
        "outbound connection",
        "schema validator",
    }
