"""Every place the server's code reaches a sink is listed here with what keeps tenant input out of it.

A sink is a call that sends a model request (litellm), imports code by name, builds a JSON Schema
validator, or opens an outbound connection. The test reads the source of every server package and finds
each such call; a new one (or one that moved) fails the test until it is added to `SINKS` with the reason
a tenant's input cannot choose where it goes, so no new door opens silently.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("om_core", "om_api", "om_workers", "om_app")

#: Call names (the last attribute, or the bare name) of each kind of sink.
KINDS: dict[str, frozenset[str]] = {
    "model call": frozenset(
        {"completion", "acompletion", "embedding", "aembedding", "responses", "aresponses", "text_completion"}
    ),
    "import by name": frozenset({"import_module", "__import__"}),
    "schema validator": frozenset(
        {"validate", "validator_for", "check_schema", "Draft202012Validator", "Draft7Validator", "Registry"}
    ),
    "outbound connection": frozenset(
        {
            "urlopen",
            "create_connection",
            "HTTPConnection",
            "HTTPSConnection",
            "Client",
            "AsyncClient",
            "HTTPTransport",
            "AsyncHTTPTransport",
            "get",
            "post",
            "put",
            "request",
            "stream",
        }
    ),
}
#: The object a model-call or validator name must be read from to count (a `completion` of anything
#: else is not litellm's).
OWNERS = {
    "model call": ("litellm",),
    "schema validator": ("jsonschema", "validator_for", "referencing", "Draft", "validators"),
    "outbound connection": ("httpx.", "socket.", "urllib.", "http.client.", "requests."),
}

#: (file, enclosing function, kind) -> why tenant input cannot choose the destination.
SINKS: dict[tuple[str, str, str], str] = {}


#: Names too common to count when called bare (`get(...)` is rarely a request).
_GENERIC = frozenset(
    {"get", "post", "put", "request", "stream", "validate", "Client", "AsyncClient", "Registry"}
)


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return f"{_name(node.func)}()"
    return "?"


def _kind(call: ast.Call) -> str | None:
    dotted = _name(call.func)
    last = dotted.rsplit(".", 1)[-1]
    for kind, names in KINDS.items():
        if last not in names:
            continue
        owners = OWNERS.get(kind)
        if owners is None or any(owner in dotted for owner in owners):
            return kind
        if dotted == last and last not in _GENERIC:
            return kind
    return None


def _sinks_in(path: Path) -> Iterator[tuple[str, str, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    where = str(path.relative_to(ROOT))

    def visit(node: ast.AST, scope: str) -> Iterator[tuple[str, str, str]]:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = f"{scope}.{child.name}" if scope else child.name
            if isinstance(child, ast.Call):
                kind = _kind(child)
                if kind is not None:
                    yield where, scope or "<module>", kind
            yield from visit(child, inner)

    yield from visit(tree, "")


def found() -> set[tuple[str, str, str]]:
    return {
        sink
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for sink in _sinks_in(path)
    }


def test_every_sink_is_listed_with_its_reason() -> None:
    sinks = found()
    assert ("om_core/models/client.py", "ModelClient._call_once", "model call") in sinks, "the scan works"
    assert sinks - set(SINKS) == set(), "new sinks: add each to SINKS with what keeps tenant input out"
    assert set(SINKS) - sinks == set(), "these sinks are gone: remove them from SINKS"
