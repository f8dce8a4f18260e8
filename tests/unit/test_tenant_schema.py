"""om_core.tenancy.json_schema: what a tenant schema may hold, and that validating with one is bounded work
that never reaches the network."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import referencing.exceptions
from jsonschema import Draft202012Validator

from om_core.tenancy import json_schema as ts
from om_core.tenancy.json_schema import SchemaRefused, check_schema, validate


@pytest.fixture
def canary() -> Iterator[tuple[int, list[int]]]:
    """A loopback listener counting the connections it accepts: (port, [count])."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    seen = [0]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            seen[0] += 1
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    stop.set()
    thread.join(timeout=5)
    server.close()


def refused(schema: Any) -> SchemaRefused:
    with pytest.raises(SchemaRefused) as raised:
        check_schema(schema)
    return raised.value


# ------------------------------------------------------------------------------------------ at write


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        ({"$ref": "http://127.0.0.1:9/x.json"}, "s.$ref"),
        ({"properties": {"a": {"$ref": "https://example.org/a"}}}, "s.properties.a.$ref"),
        ({"$defs": {"a": {"$dynamicRef": "ftp://127.0.0.1/a"}}}, "s.$defs.a.$dynamicRef"),
        ({"allOf": [{"$recursiveRef": "file:///etc/passwd"}]}, "s.allOf[0].$recursiveRef"),
        ({"$ref": "other.json"}, "s.$ref"),
        ({"$id": "http://127.0.0.1:9/base/", "items": {"$ref": "x.json"}}, "s.items.$ref"),
        # Not a keyword, but a local $ref can make it a schema: nothing is skipped as "only data".
        ({"$ref": "#/hidden", "hidden": {"$ref": "http://127.0.0.1:9/"}}, "s.hidden.$ref"),
    ],
)
def test_only_local_references_are_accepted(schema: dict[str, Any], field: str) -> None:
    error = refused(schema)
    assert error.field("s") == field
    assert "only local references" in error.detail


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        ({"properties": {"a": {"pattern": "(a)\\1"}}}, "s.properties.a.pattern"),
        ({"properties": {"a": {"pattern": "x(?=y)"}}}, "s.properties.a.pattern"),
        ({"properties": {"a": {"pattern": "(?<!x)y"}}}, "s.properties.a.pattern"),
        ({"patternProperties": {"^(?!admin)": {}}}, "s.patternProperties.^(?!admin)"),
        ({"items": [{"pattern": "a{2000}"}]}, "s.items[0].pattern"),
    ],
)
def test_a_regex_re2_cannot_compile_is_refused_with_the_re2_rules(schema: dict[str, Any], field: str) -> None:
    error = refused(schema)
    assert error.field("s") == field
    assert "not an RE2 regular expression" in error.detail and "backreferences" in error.detail


def test_dialects_are_known_ones_only() -> None:
    check_schema({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"})
    check_schema({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"})
    error = refused({"$schema": "http://127.0.0.1:9/my-dialect", "type": "object"})
    assert error.path == ("$schema",) and "never fetches a metaschema" in error.detail
    assert refused({"$schema": 7}).path == ("$schema",)
    assert refused({"$defs": {"a": {"$schema": "https://evil.example/x"}}}).path == ("$defs", "a", "$schema")


def test_size_and_depth_are_bounded() -> None:
    wide = {"properties": {f"p{i}": {"description": "x" * 100} for i in range(ts.MAX_SCHEMA_BYTES // 100)}}
    assert "bytes" in refused(wide).detail
    deep: dict[str, Any] = {}
    for _ in range(ts.MAX_SCHEMA_DEPTH):
        deep = {"not": deep}
    assert "nests deeper" in refused(deep).detail
    fits: dict[str, Any] = {}
    for _ in range(ts.MAX_SCHEMA_DEPTH - 1):
        fits = {"not": fits}
    check_schema(fits)


def test_the_metaschema_still_applies_and_names_the_keyword() -> None:
    error = refused({"type": "object", "properties": {"a": {"type": "nope"}}})
    assert error.field("s") == "s.properties.a.type"
    assert "not a valid JSON Schema" in error.detail
    assert refused({"minLength": -1}).path == ("minLength",)


def test_a_schema_that_is_not_json_is_refused() -> None:
    assert "not JSON" in refused({"enum": [{1, 2}]}).detail
    assert "not JSON" in refused({"const": float("nan")}).detail


def test_usual_schemas_pass() -> None:
    check_schema(
        {
            "$defs": {"city": {"type": "string", "pattern": "^\\p{Lu}\\w+$"}, "tree": {"$anchor": "node"}},
            "type": "object",
            "properties": {
                "home": {"$ref": "#/$defs/city"},
                "node": {"$ref": "#node"},
                "self": {"$ref": "#"},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            },
            "patternProperties": {"^x-[a-z]+$": {"type": "string", "format": "email"}},
        }
    )


# -------------------------------------------------------------------------------------------- at use


def test_patterns_run_on_re2_in_linear_time() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}}
    started = time.monotonic()
    mismatch = validate(schema, {"x": "a" * 100_000 + "!"})
    assert time.monotonic() - started < 1.0
    assert mismatch is not None and mismatch.path == ("x",) and "does not match" in mismatch.message
    assert len(mismatch.message) < 400, "the value is shortened in the message"
    assert validate(schema, {"x": "a" * 100_000}) is None


def test_pattern_properties_and_format_regex_use_re2() -> None:
    schema = {"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}}}
    assert validate(schema, {"a" * 50_000 + "!": "not checked", "aaa": 1}) is None
    mismatch = validate(schema, {"aaa": "x"})
    assert mismatch is not None and mismatch.path == ("aaa",)
    regex = {"type": "string", "format": "regex"}
    assert validate(regex, "^[a-z]+$") is None
    assert validate(regex, "(a)\\1") is not None, "not RE2, so not a regex here"


def test_formats_are_checked_locally() -> None:
    assert validate({"format": "email"}, "ada@example.org") is None
    mismatch = validate({"format": "email"}, "no at sign")
    assert mismatch is not None and "email" in mismatch.message
    assert validate({"format": "ipv4"}, "999.1.1.1") is not None
    assert validate({"format": "a-format-nobody-knows"}, "anything") is None


def test_unique_items_is_linear_and_uses_json_equality() -> None:
    schema = {"type": "array", "uniqueItems": True}
    started = time.monotonic()
    assert validate(schema, [{"i": i} for i in range(20_000)]) is None
    assert validate(schema, [{"i": i} for i in range(20_000)] + [{"i": 0}]) is not None
    assert time.monotonic() - started < 5.0, "the quadratic check takes minutes"
    assert validate(schema, [1, 1.0]) is not None, "1 and 1.0 are one JSON number"
    assert validate(schema, [1, True]) is None and validate(schema, [0, False, None]) is None
    assert validate(schema, [[1, {"a": [2]}], [1, {"a": [2.0]}]]) is not None
    assert validate(schema, [{"a": 1, "b": 2}, {"b": 2, "a": 1}]) is not None


def test_the_value_is_bounded() -> None:
    too_big = validate({"type": "string"}, "x" * (ts.MAX_VALUE_BYTES + 1))
    assert too_big is not None and "bytes" in too_big.message
    nested: Any = 1
    for _ in range(ts.MAX_VALUE_DEPTH + 1):
        nested = [nested]
    too_deep = validate({"type": "array"}, nested)
    assert too_deep is not None and "nests deeper" in too_deep.message


def test_multiplying_references_are_stopped_by_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thirty levels of `allOf` with two references each: 2^30 evaluations without the budget."""
    defs: dict[str, Any] = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(30)}
    defs["d30"] = {"type": "integer"}
    schema = {"$defs": defs, "$ref": "#/$defs/d0"}
    check_schema(schema)

    monkeypatch.setattr(ts, "VALIDATION_DEADLINE_S", 0.2)
    started = time.monotonic()
    stopped = validate(schema, 1)
    assert time.monotonic() - started < 1.0
    assert stopped is not None and "validation stopped after 0.2 s" in stopped.message

    monkeypatch.setattr(ts, "VALIDATION_DEADLINE_S", 60.0)
    monkeypatch.setattr(ts, "MAX_VALIDATION_STEPS", 5_000)
    stopped = validate(schema, 1)
    assert stopped is not None and "after 5000 steps" in stopped.message
    assert ts._BUDGET.get() is None, "the budget does not outlive its validation"


def test_unevaluated_properties_walks_are_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """`unevaluatedProperties` walks the references itself (outside the keyword functions); the type
    checks it makes spend the same budget."""
    defs: dict[str, Any] = {
        f"d{i}": {
            "dependentSchemas": {"a": {"$ref": f"#/$defs/d{i + 1}"}, "b": {"$ref": f"#/$defs/d{i + 1}"}}
        }
        for i in range(30)
    }
    defs["d30"] = {"properties": {"a": True}}
    schema = {"$defs": defs, "$ref": "#/$defs/d0", "unevaluatedProperties": False}
    monkeypatch.setattr(ts, "VALIDATION_DEADLINE_S", 0.2)
    started = time.monotonic()
    stopped = validate(schema, {"a": 1, "b": 2})
    assert time.monotonic() - started < 1.0
    assert stopped is not None and "validation stopped" in stopped.message


def test_a_reference_loop_is_refused_not_crashed() -> None:
    schema = {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}
    with pytest.raises(SchemaRefused) as raised:
        validate(schema, 1)
    assert "loop" in raised.value.detail


def test_a_missing_local_reference_says_so() -> None:
    with pytest.raises(SchemaRefused) as raised:
        validate({"$ref": "#/$defs/missing"}, 1)
    assert "not inside the schema" in raised.value.detail


def test_a_stored_schema_is_checked_at_use_before_anything_runs(canary: tuple[int, list[int]]) -> None:
    port, seen = canary
    with pytest.raises(SchemaRefused) as raised:
        validate({"properties": {"x": {"$ref": f"http://127.0.0.1:{port}/x"}}}, {"x": 1})
    assert raised.value.path == ("properties", "x", "$ref")
    with pytest.raises(SchemaRefused):
        validate({"properties": {"x": {"pattern": "(a+)+\\1"}}}, {"x": "a" * 40 + "!"})
    assert seen[0] == 0


def test_the_registry_retrieves_nothing_even_past_the_static_check(canary: tuple[int, list[int]]) -> None:
    """Defence in depth: a validator built on the safe class and registry, given a remote reference the
    static check would have refused, fails to resolve it without connecting."""
    port, seen = canary
    url = f"http://127.0.0.1:{port}/schema.json"
    validator = ts._safe_class(Draft202012Validator)(
        {"$ref": url}, registry=ts._REGISTRY, format_checker=ts._FORMATS
    )
    with pytest.raises(referencing.exceptions.Unresolvable) as raised:
        list(validator.iter_errors(1))
    assert url in ts._unresolvable(raised.value)
    with pytest.raises(referencing.exceptions.Unretrievable):
        ts._REGISTRY.get_or_retrieve(url)
    assert seen[0] == 0


def test_validators_are_cached_per_schema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}
    first = ts._compiled(schema)
    assert ts._compiled(dict(reversed(list(schema.items())))) is first, "the key is the canonical JSON"
    assert validate(schema, {"n": 1}) is None
    mismatch = validate(schema, {"n": -1})
    assert mismatch is not None and mismatch.where == "n"
    bad = {"pattern": "(a)\\1"}
    hits = ts._CACHE.hits
    refused(bad)
    refused(bad)
    assert ts._CACHE.hits > hits, "a refusal is cached too"


def test_concurrent_validations_keep_their_own_budgets() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^[a-z]+$"}}}
    results: list[Any] = []

    def run(i: int) -> None:
        results.append(validate(schema, {"x": "abc" if i % 2 else "ABC"}))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(results) == 16
    assert sum(r is None for r in results) == 8


def test_no_other_module_reaches_jsonschema() -> None:
    """Every tenant schema goes through this module: a new `jsonschema` (or `referencing`) import anywhere
    else in the server packages is a new validator that skipped these rules, and fails here."""
    import ast
    from pathlib import Path

    from tests.support.packages import SERVER_PACKAGES

    root = Path(ts.__file__).resolve().parents[2]
    reaching = set()
    for package in SERVER_PACKAGES:
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                if any(name.split(".")[0] in {"jsonschema", "referencing"} for name in names):
                    reaching.add(str(path.relative_to(root)))
    assert reaching == {"om_core/tenancy/json_schema.py"}
