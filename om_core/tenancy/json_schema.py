"""Tenant-written JSON Schemas are data: checked once where they are written, validated safely where used.

A schema a tenant key writes (`workingMemory.schema`, an extractor's `schema`) reaches `jsonschema`, which
on its own would fetch any `$ref` it cannot resolve (http, https, ftp, `file:`; redirects followed, no
timeout) and run `pattern` with Python's backtracking `re` (`^(a+)+$` doubles its time per character and
holds the GIL). Every tenant schema therefore goes through this module and nowhere else:

- `check_schema` (at write, the API answers 422 naming the keyword): bounded size and nesting; every
  reference local (`#...`); `$schema` one of the dialects jsonschema ships (never fetched); every regular
  expression compiled by RE2, a linear-time engine, or refused; then the dialect's metaschema.
- `validate` (at use, also for a schema stored before these checks existed): the same check (cached), then
  a validator whose reference registry retrieves nothing, whose `pattern`/`patternProperties`/`format:
  regex` run on RE2, whose `uniqueItems` is linear, whose format checks are local code only, on a value of
  bounded size, with a step and time budget so that no schema can make validation hold the process.
"""

from __future__ import annotations

import contextvars
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jsonschema
import re2
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import (
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
    FormatChecker,
    ValidationError,
)
from jsonschema.exceptions import best_match

from om_core.sized_lru import SizedLRU

#: Largest schema accepted, as compact JSON text (a working memory's own content is at most 64 KiB).
MAX_SCHEMA_BYTES = 64 * 1024
#: Deepest nesting of objects and arrays in a schema (a schema nests two levels per sub-object).
MAX_SCHEMA_DEPTH = 40
#: Largest value validated, as compact JSON text, and its deepest nesting.
MAX_VALUE_BYTES = 256 * 1024
MAX_VALUE_DEPTH = 64
#: Validation of one value stops after this many steps (type checks) or this long, whichever comes first.
MAX_VALIDATION_STEPS = 1_000_000
VALIDATION_DEADLINE_S = 1.0

#: Memory the per-process cache of checked schemas and their validators may take.
_CACHE_BYTES = 16 * 1024 * 1024

#: The keywords whose value is a reference to another schema.
REFERENCE_KEYWORDS = frozenset({"$ref", "$dynamicRef", "$recursiveRef"})

#: Dialects a schema may name in `$schema`: the ones jsonschema ships, resolved locally (never fetched).
DIALECTS: dict[str, type[Any]] = {
    str(cls.META_SCHEMA.get("$id") or cls.META_SCHEMA.get("id")).rstrip("#"): cls
    for cls in (Draft202012Validator, Draft201909Validator, Draft7Validator, Draft6Validator, Draft4Validator)
}
DEFAULT_DIALECT = str(Draft202012Validator.META_SCHEMA["$id"])

RE2_SYNTAX = (
    "om runs regular expressions with RE2 (linear time): no backreferences (\\1), no lookahead or lookbehind "
    "((?=, (?!, (?<=, (?<!), no possessive or atomic groups, repetition counts up to 1000"
)

#: `format` checks copied from jsonschema (each is local code); `regex` is replaced by RE2's own.
_LOCAL_FORMATS = (
    "date",
    "date-time",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uuid",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "json-pointer",
    "relative-json-pointer",
)


class SchemaRefused(ValueError):
    """A tenant schema breaks a rule. `path` locates the offending keyword inside the schema, so a caller
    can name the field (`workingMemory.schema.properties.x.pattern`); `detail` says what to do."""

    def __init__(self, path: Sequence[str | int], detail: str) -> None:
        self.path = tuple(path)
        self.detail = detail
        super().__init__(f"{pointer(self.path)}: {detail}" if self.path else detail)

    def field(self, prefix: str) -> str:
        """The dotted field of the offending keyword under `prefix` (the schema's own field)."""
        return prefix + dotted(self.path)


@dataclass(frozen=True)
class Mismatch:
    """A value that does not satisfy its schema: where (a path in the value) and why."""

    path: tuple[str | int, ...]
    message: str

    @property
    def where(self) -> str:
        """The path as `a/0/b`, "" for the value itself."""
        return "/".join(str(p) for p in self.path)


def dotted(path: Sequence[str | int]) -> str:
    """`("properties", "x", "allOf", 0)` as `.properties.x.allOf[0]`."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def pointer(path: Sequence[str | int]) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


# ------------------------------------------------------------------------------------------ at write


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise `SchemaRefused` unless `schema` is safe to validate with; the answer is cached per schema."""
    _compiled(schema)


# -------------------------------------------------------------------------------------------- at use


def validate(schema: Mapping[str, Any], value: Any) -> Mismatch | None:
    """None when `value` satisfies `schema`, else the most relevant mismatch. Raises `SchemaRefused` when
    the schema itself cannot be used (one stored before the write checks existed)."""
    validator = _compiled(schema)
    too_big = _value_bounds(value)
    if too_big is not None:
        return too_big
    budget = _Budget(time.monotonic() + VALIDATION_DEADLINE_S)
    token = _BUDGET.set(budget)
    try:
        error = best_match(validator.iter_errors(value))
    except ValidationStopped as exc:
        return Mismatch((), str(exc))
    except referencing.exceptions.Unresolvable as exc:
        raise SchemaRefused((), _unresolvable(exc)) from None
    except RecursionError:
        raise SchemaRefused(
            (),
            "its references loop without consuming the value (e.g. a $ref to itself in allOf); make every "
            "recursive $ref sit under properties or items",
        ) from None
    finally:
        _BUDGET.reset(token)
    if error is None:
        return None
    return Mismatch(tuple(error.absolute_path), error.message)


class ValidationStopped(Exception):
    """Validation ran out of its step or time budget (the schema's references multiply the work)."""


# ---------------------------------------------------------------------------------- the static check


def _compiled(schema: Mapping[str, Any]) -> Any:
    """The validator of a checked schema, from the cache when this process met the schema before."""
    text = _schema_text(schema)
    cached = _CACHE.get(text)
    if cached is None:
        try:
            cached = _check_and_build(json.loads(text))
        except SchemaRefused as exc:
            cached = exc
        _CACHE.put(text, cached, 4 * len(text) + 4096)
    if isinstance(cached, SchemaRefused):
        raise SchemaRefused(cached.path, cached.detail)
    return cached


def _schema_text(schema: Mapping[str, Any]) -> str:
    if not isinstance(schema, Mapping):
        raise SchemaRefused((), "must be a JSON object (a JSON Schema)")
    text = _json_text(schema, "the schema", sort_keys=True)
    if isinstance(text, SchemaRefused):
        raise text
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SCHEMA_BYTES:
        raise SchemaRefused(
            (), f"is {size} bytes; a schema holds at most {MAX_SCHEMA_BYTES} bytes (as compact JSON)"
        )
    if _nesting(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise _too_deep(schema, MAX_SCHEMA_DEPTH, "the schema")
    return text


def _json_text(value: Any, what: str, *, sort_keys: bool = False) -> str | SchemaRefused:
    """Compact JSON text, or the refusal of a value that is not JSON."""
    try:
        return json.dumps(
            value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except RecursionError:
        return SchemaRefused((), f"{what} nests too deep to read; flatten it")
    except (TypeError, ValueError) as exc:
        return SchemaRefused((), f"{what} is not JSON ({exc})")


def _nesting(value: Any, limit: int) -> int:
    """The deepest nesting of arrays and objects in `value`, counted no further than `limit + 1`."""
    if not isinstance(value, Mapping | list | tuple):
        return 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > limit:
            break
        children = node.values() if isinstance(node, Mapping) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, Mapping | list | tuple))
    return deepest


def _too_deep(node: Any, limit: int, what: str) -> SchemaRefused:
    """The refusal naming the first place nested deeper than `limit` (searched no deeper than that)."""
    detail = f"{what} nests deeper than {limit} levels; flatten it (name parts in $defs)"

    def find(current: Any, path: tuple[str | int, ...]) -> tuple[str | int, ...] | None:
        if len(path) >= limit:
            return path if isinstance(current, Mapping | list) else None
        children: Iterable[tuple[str | int, Any]] = ()
        if isinstance(current, Mapping):
            children = ((str(k), v) for k, v in current.items())
        elif isinstance(current, list):
            children = enumerate(current)
        for key, child in children:
            found = find(child, (*path, key))
            if found is not None:
                return found
        return None

    return SchemaRefused(find(node, ()) or (), detail)


def _check_and_build(schema: dict[str, Any]) -> Any:
    cls = _dialect(schema)
    for path, key, value in _members(schema, ()):
        if key in REFERENCE_KEYWORDS and isinstance(value, str) and not value.startswith("#"):
            raise SchemaRefused(
                (*path, key),
                f"refers to {value!r}, outside the schema; only local references ('#', '#/$defs/name', "
                "'#anchor') are allowed, om never fetches a schema: copy the definition into $defs",
            )
        if key == "$schema" and isinstance(value, str):
            _dialect_of(value, (*path, key))
        if key == "pattern" and isinstance(value, str):
            _regex_or_refuse(value, (*path, key))
        if key == "patternProperties" and isinstance(value, Mapping):
            for expression in value:
                _regex_or_refuse(str(expression), (*path, key, str(expression)))
    safe = _safe_class(cls)
    error = _first_error(_meta_validator(cls), schema)
    if error is not None:
        raise SchemaRefused(tuple(error.absolute_path), f"is not a valid JSON Schema: {error.message}")
    return safe(schema, format_checker=_FORMATS, registry=_REGISTRY)


def _first_error(validator: Any, instance: Any) -> ValidationError | None:
    token = _BUDGET.set(_Budget(time.monotonic() + VALIDATION_DEADLINE_S))
    try:
        return best_match(validator.iter_errors(instance))
    except ValidationStopped:
        raise SchemaRefused((), "is too complex to check; make it smaller") from None
    finally:
        _BUDGET.reset(token)


def _members(node: Any, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
    """Every (path of the object, key, value) in the schema, at any position: a local `$ref` can make any
    part of the document a schema, so nothing is skipped as "only data"."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield path, str(key), value
            yield from _members(value, (*path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _members(value, (*path, i))


def _dialect(schema: Mapping[str, Any]) -> type[Any]:
    named = schema.get("$schema", DEFAULT_DIALECT)
    if not isinstance(named, str):
        raise SchemaRefused(("$schema",), "must be a string naming a JSON Schema dialect")
    return _dialect_of(named, ("$schema",))


def _dialect_of(named: str, path: tuple[str | int, ...]) -> type[Any]:
    cls = DIALECTS.get(named.rstrip("#"))
    if cls is None:
        raise SchemaRefused(
            path,
            f"names the dialect {named!r}, which om does not know (it never fetches a metaschema); use one "
            f"of {', '.join(sorted(DIALECTS))} or leave $schema out for 2020-12",
        )
    return cls


def _regex_or_refuse(expression: str, path: tuple[str | int, ...]) -> None:
    problem = _re2_problem(expression)
    if problem is not None:
        raise SchemaRefused(
            path, f"{expression!r} is not an RE2 regular expression ({problem}); {RE2_SYNTAX}"
        )


# --------------------------------------------------------------------------------- the safe validator


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@lru_cache(maxsize=2048)
def _re2(expression: str) -> Any:
    """The compiled expression; raises `re2.error` when RE2 cannot compile it."""
    return re2.compile(expression, _RE2_OPTIONS)


def _re2_problem(expression: str) -> str | None:
    try:
        _re2(expression)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
    return None


def _pattern(validator: Any, expression: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    problem = _re2_problem(expression)
    if problem is not None:
        yield ValidationError(
            f"the schema's pattern {expression!r} is not RE2 syntax ({problem}); {RE2_SYNTAX}"
        )
    elif _re2(expression).search(instance) is None:
        yield ValidationError(f"{_short(instance)} does not match {expression!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for expression, subschema in patterns.items():
        problem = _re2_problem(expression)
        if problem is not None:
            yield ValidationError(
                f"the schema's patternProperties key {expression!r} is not RE2 syntax ({problem}); "
                + RE2_SYNTAX
            )
            continue
        compiled = _re2(expression)
        for key, value in instance.items():
            if compiled.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=expression)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """jsonschema's own check compares every pair of unhashable items (quadratic); this one hashes a
    canonical form of each item, with JSON Schema's equality (1 == 1.0, true != 1)."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        form = _canonical(item)
        if form in seen:
            yield ValidationError(f"{_short(instance)} has non-unique elements")
            return
        seen.add(form)


_TRUE, _FALSE = object(), object()


def _canonical(value: Any) -> Any:
    """A hashable form equal for JSON-equal values: Python's own equality already makes 1 and 1.0 one
    number; booleans are set apart (True == 1 in Python, not in JSON); arrays become tuples, objects
    frozensets of pairs (never equal to each other)."""
    kind = type(value)
    if kind is bool:
        return _TRUE if value else _FALSE
    if kind is dict:
        return frozenset((k, _canonical(v)) for k, v in value.items())
    if kind is list or kind is tuple:
        return tuple(_canonical(v) for v in value)
    return value


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _regex_format(instance: object) -> bool:
    return not isinstance(instance, str) or _re2_problem(instance) is None


def _format_checker() -> FormatChecker:
    """jsonschema's local format checks (no network, whatever optional packages are installed) and `regex`
    through RE2 instead of Python's `re`."""
    checker = FormatChecker(formats=())
    known = Draft202012Validator.FORMAT_CHECKER.checkers
    for name in _LOCAL_FORMATS:
        if name in known:
            function, raises = known[name]
            checker.checks(name, raises)(function)
    checker.checks("regex")(_regex_format)
    return checker


def _refuse_retrieval(uri: str) -> referencing.Resource[Any]:
    raise LookupError(f"om never fetches a schema ({uri!r} is not inside the schema)")


def _unresolvable(exc: referencing.exceptions.Unresolvable) -> str:
    ref = getattr(exc, "ref", None)
    return (
        f"it refers to {ref!r}, which is not inside the schema; om never fetches a schema: keep every "
        "reference local ('#/$defs/name') and make sure it exists"
    )


class _Budget:
    """Steps left and the deadline of one validation (a context variable, so threads never share one)."""

    __slots__ = ("deadline", "steps")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.steps = 0

    def spend(self) -> None:
        self.steps += 1
        if self.steps % 512 == 0:
            if self.steps > MAX_VALIDATION_STEPS:
                raise ValidationStopped(
                    f"validation stopped after {MAX_VALIDATION_STEPS} steps: the schema's references and "
                    "combinators multiply the work; simplify the schema"
                )
            if time.monotonic() > self.deadline:
                raise ValidationStopped(
                    f"validation stopped after {VALIDATION_DEADLINE_S:g} s: the schema's references and "
                    "combinators multiply the work; simplify the schema"
                )


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("om_schema_budget", default=None)

_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")


def _counting_type_checker(base: Any) -> Any:
    """`base` with every type check spending one step of the current budget: every keyword and every
    internal walk (`unevaluatedProperties` resolving references) checks types, so this counts them all."""

    def counted(name: str) -> Callable[[Any, Any], bool]:
        def check(_checker: Any, instance: Any) -> bool:
            budget = _BUDGET.get()
            if budget is not None:
                budget.spend()
            return bool(base.is_type(instance, name))

        return check

    return base.redefine_many({name: counted(name) for name in _TYPES})


_SAFE_CLASSES: dict[type[Any], type[Any]] = {}
_META_VALIDATORS: dict[type[Any], Any] = {}
_SAFE_LOCK = threading.Lock()


def _safe_class(cls: type[Any]) -> type[Any]:
    """`cls` with RE2 `pattern`/`patternProperties`, a linear `uniqueItems` and counted type checks."""
    with _SAFE_LOCK:
        safe = _SAFE_CLASSES.get(cls)
        if safe is None:
            safe = jsonschema.validators.extend(
                cls,
                validators={
                    "pattern": _pattern,
                    "patternProperties": _pattern_properties,
                    "uniqueItems": _unique_items,
                },
                type_checker=_counting_type_checker(cls.TYPE_CHECKER),
            )
            _SAFE_CLASSES[cls] = safe
        return safe


def _meta_validator(cls: type[Any]) -> Any:
    """Checks a schema against its dialect's metaschema; `format: regex` (`pattern`) through RE2."""
    with _SAFE_LOCK:
        meta = _META_VALIDATORS.get(cls)
    if meta is None:
        meta = _safe_class(cls)(cls.META_SCHEMA, format_checker=_FORMATS, registry=_REGISTRY)
        with _SAFE_LOCK:
            _META_VALIDATORS[cls] = meta
    return meta


def _value_bounds(value: Any) -> Mismatch | None:
    text = _json_text(value, "the value")
    if isinstance(text, SchemaRefused):
        return Mismatch(text.path, text.detail)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_VALUE_BYTES:
        return Mismatch((), f"the value is {size} bytes; at most {MAX_VALUE_BYTES} bytes are validated")
    if _nesting(value, MAX_VALUE_DEPTH) > MAX_VALUE_DEPTH:
        refusal = _too_deep(value, MAX_VALUE_DEPTH, "the value")
        return Mismatch(refusal.path, refusal.detail)
    return None


#: A registry that knows only the dialects' metaschemas (jsonschema adds them) and retrieves nothing.
_REGISTRY: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
_FORMATS = _format_checker()
_CACHE: SizedLRU[str, Any] = SizedLRU(_CACHE_BYTES)
