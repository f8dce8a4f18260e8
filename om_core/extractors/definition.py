"""What an extractor is (§8.2): its name and derived slug, its instructions and schema, where its value
is persisted, and the rules a definition must follow.

A definition is checked when the configuration is resolved, so a bad one is refused where it is written
(the API answers 422 with the rule and the offending entry) instead of failing every later cycle.

A JSON definition never names code: `use` and `onExtracted` name what the operator registered
(`om_core.extractors.registry`), resolved for the tenant of the run. Resolving a stored configuration
checks those names for their shape only (`parse_list(..., resolve_use=False)`): the process resolving it
need not have loaded the plugins, and a configuration stored before names were required must still
resolve, so its thread keeps working. The names are resolved where the API writes a tenant's config
(`registry.check_tenant_overrides`, with the tenant) and where a run uses it (`compose`), where an entry that
cannot be resolved is refused and reported as that extractor's failure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from om_core.errors import OMConfigError
from om_core.tenancy.scoped_ids import StoredId

Source = Literal["observer", "reflector"]

#: Slugs user extractors must not produce: XML tags of the output format and the built-ins (§8.2).
RESERVED_SLUGS = frozenset(
    {
        "observations",
        "observation",
        "extracted-values",
        "thread",
        "message",
        "messages",
        "conversation",
        "history",
        "system",
        "user",
        "assistant",
        "tool",
        "current-task",
        "suggested-response",
        "thread-title",
    }
)

_SLUG_RE = re.compile(r"^[a-z][a-z0-9-]*[a-z0-9]$|^[a-z]$")
#: An `onExtracted` callback name: lower-case letters, digits, `-` and `_`, starting with a letter, at most
#: 64 characters. No `.` or `:`, so an import path (`module:function`, `pkg.mod.fn`) is never a name.
CALLBACK_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_REGISTER_HELP = (
    "the operator registers one with om_core.extractors.registry.register_callback(name, fn) in a module "
    "listed in OM_PLUGINS"
)
_QUOTES_RE = re.compile(r"['\"`]")
_NON_SLUG_RE = re.compile(r"[^a-z0-9]+")

#: The keys a JSON extractor entry may carry (camelCase, as users write them).
JSON_KEYS = frozenset(
    {
        "name",
        "instructions",
        "schema",
        "includePreviousExtraction",
        "metadataKeyPath",
        "onExtracted",
        "context",
        "use",
    }
)


class ExtractorError(OMConfigError):
    """An extractor definition breaks a rule of §8.2; `code` is the spec's `EXTRACTOR_*` code."""


@dataclass(frozen=True)
class RunContext:
    """What callables (`instructions`, `schema`) receive at run time (§8.2): whichever values are known."""

    source: Source
    thread_id: StoredId | None = None
    resource_id: StoredId | None = None
    #: OM's metadata of the thread as stored before this run.
    om_metadata: Mapping[str, Any] = field(default_factory=dict)
    #: The spec's `memory`: the store the run belongs to (the engine's SQLAlchemy engine), so a hook can
    #: write a value elsewhere (the working-memory extractor writes working memory through it).
    memory: Any = None


@dataclass(frozen=True)
class ExtractedContext:
    """What `on_extracted` receives (§8.6.2): the extractor, the run, the value persisted before this run
    (`previous`, None when none), the value this run produced (`current`) and `send_signal`."""

    source: Source
    extractor: Extractor
    thread_id: StoredId | None
    resource_id: StoredId | None
    previous: Any
    current: Any
    memory: Any = None
    #: The spec's `sendSignal`: `ctx.send_signal({"type": "user-message", "contents": "..."})` writes a
    #: `data-om-signal` event with the values (`om_core.extractors.signals`); None where no run sends one.
    send_signal: Callable[[Mapping[str, Any]], None] | None = None


#: An `on_extracted` function: the value it returns replaces the extracted one (None keeps it).
Callback = Callable[[ExtractedContext], Any]
Instructions = str | Callable[[RunContext], str]
#: A JSON Schema object, a pydantic model class, or a callable of the run context returning either.
SchemaSpec = Mapping[str, Any] | type | Callable[[RunContext], Any] | None


def slugify(name: str) -> str:
    """The slug of a name (§8.2): lower-case, quotes dropped, every other run of non `a-z0-9` characters
    one `-`, no leading or trailing `-`. The result may still be invalid ("123abc"); `check_slug` says."""
    text = _QUOTES_RE.sub("", name.strip().lower())
    return _NON_SLUG_RE.sub("-", text).strip("-")


def check_slug(name: str, *, field: str) -> str:
    """The slug of `name`, or the `EXTRACTOR_*` error a user can act on."""
    if not name.strip():
        raise ExtractorError(
            "EXTRACTOR_NAME_REQUIRED", f"{field}.name", "an extractor needs a non-empty name"
        )
    slug = slugify(name)
    if not slug or not _SLUG_RE.match(slug):
        raise ExtractorError(
            "EXTRACTOR_INVALID_SLUG",
            f"{field}.name",
            f"the name gives the slug {slug!r}; a slug must start with a letter and hold letters, digits "
            "and '-' (e.g. 'User profile' -> 'user-profile')",
            name,
        )
    return slug


@dataclass(frozen=True)
class Extractor:
    """One extractor. `slug` is derived from `name`; `schema` None makes it an inline string extractor,
    anything else a structured one (a follow-up structured-output call). `metadata_key_path` None means
    the value is not persisted in OM metadata (the spec's `false`); its default is `extracted.<slug>`.
    `context` shows the persisted value to the actor in `/turns` (volatile part of the context).
    `builtin` marks OM's own continuation values, which skip `on_extracted`. `refusal` set: a configured
    entry this run cannot use (it names code not registered for the tenant, or breaks a rule); it is not
    run, and the run reports `refusal` as its failure."""

    name: str
    instructions: Instructions
    schema: SchemaSpec = None
    include_previous: bool = True
    metadata_key_path: str | None = ""
    on_extracted: Callback | None = None
    context: bool = False
    builtin: bool = False
    refusal: str | None = None
    slug: str = field(init=False)

    def __post_init__(self) -> None:
        slug = check_slug(self.name, field="extractor")
        if not self.builtin and slug in RESERVED_SLUGS:
            raise ExtractorError(
                "EXTRACTOR_RESERVED_SLUG",
                "extractor.name",
                f"the slug {slug!r} is reserved (an output tag or a built-in); choose another name",
                self.name,
            )
        if isinstance(self.instructions, str) and not self.instructions.strip():
            raise ExtractorError(
                "EXTRACTOR_INSTRUCTIONS_REQUIRED",
                "extractor.instructions",
                f"extractor {slug!r} needs non-empty instructions saying what to extract",
            )
        object.__setattr__(self, "slug", slug)
        if self.metadata_key_path == "":
            object.__setattr__(self, "metadata_key_path", f"extracted.{slug}")

    @property
    def structured(self) -> bool:
        return self.schema is not None

    def instructions_for(self, ctx: RunContext) -> str:
        """The instructions of this run; a callable that returns nothing usable is a run-time error."""
        text = self.instructions(ctx) if callable(self.instructions) else self.instructions
        if not isinstance(text, str) or not text.strip():
            raise ExtractorError(
                "EXTRACTOR_INSTRUCTIONS_REQUIRED",
                "extractor.instructions",
                f"extractor {self.slug!r}: its instructions callable returned no text",
            )
        return text.strip()

    def json_schema_for(self, ctx: RunContext) -> dict[str, Any] | None:
        """The JSON Schema of this run (None: a plain string). A pydantic model gives its own schema."""
        schema = self.schema
        if callable(schema) and not isinstance(schema, type):
            schema = schema(ctx)
        return to_json_schema(schema)


def to_json_schema(schema: Any) -> dict[str, Any] | None:
    """A JSON Schema from a schema given as a mapping or a pydantic model class (None stays None)."""
    if schema is None:
        return None
    if isinstance(schema, type):
        model_json_schema = getattr(schema, "model_json_schema", None)
        if model_json_schema is None:
            raise TypeError(f"{schema.__name__} is not a pydantic model; give a JSON Schema or a BaseModel")
        result: dict[str, Any] = model_json_schema()
        return result
    if isinstance(schema, Mapping):
        return dict(schema)
    raise TypeError(
        f"unsupported extractor schema {type(schema).__name__}: give a JSON Schema or a BaseModel"
    )


def validate_value(schema: Mapping[str, Any] | None, value: Any) -> str | None:
    """None when `value` satisfies `schema` (a string when there is no schema), else what is wrong. The
    schema may come from a tenant, so it goes through om_core.tenancy.json_schema: nothing fetched, RE2
    patterns, bounded work."""
    if schema is None:
        return None if isinstance(value, str) else f"expected a string, got {type(value).__name__}"
    from om_core.tenancy.json_schema import SchemaRefused, validate

    try:
        mismatch = validate(schema, value)
    except SchemaRefused as exc:
        return f"the extractor's schema cannot be used ({exc.field('schema')}: {exc.detail})"
    if mismatch is None:
        return None
    return mismatch.message + (f" at {mismatch.where}" if mismatch.where else "")


def from_json(
    entry: Mapping[str, Any], *, field: str, tenant: str | None = None, resolve_names: bool = True
) -> Extractor:
    """An extractor from one JSON configuration entry (`observation.extract[i]`), for `tenant`.
    `onExtracted` names a callback and `use` a Python extractor, both registered by the operator for this
    tenant or for every tenant; a `use` entry may override the registered extractor's `context`,
    `metadataKeyPath` and `includePreviousExtraction`. `resolve_names=False` checks `onExtracted` for
    being a string only and leaves the callback out (config resolution, see the module docstring)."""
    unknown = sorted(set(entry) - JSON_KEYS)
    if unknown:
        raise ExtractorError(
            "EXTRACTOR_UNKNOWN_KEY",
            f"{field}.{unknown[0]}",
            f"unknown extractor key; allowed: {', '.join(sorted(JSON_KEYS))}",
        )
    use = entry.get("use")
    if use is not None:
        return _from_registry(entry, str(use), field=field, tenant=tenant)
    name = entry.get("name")
    if not isinstance(name, str):
        raise ExtractorError(
            "EXTRACTOR_NAME_REQUIRED", f"{field}.name", "an extractor needs a non-empty name"
        )
    instructions = entry.get("instructions")
    if not isinstance(instructions, str):
        raise ExtractorError(
            "EXTRACTOR_INSTRUCTIONS_REQUIRED",
            f"{field}.instructions",
            "an extractor needs non-empty instructions (a string) saying what to extract",
        )
    schema = entry.get("schema")
    if schema is not None and not isinstance(schema, Mapping):
        raise ExtractorError(
            "EXTRACTOR_INVALID_SCHEMA", f"{field}.schema", "schema must be a JSON Schema object"
        )
    if schema is not None:
        _check_json_schema(schema, field=f"{field}.schema")
    hook = _callback(entry, field=field, tenant=tenant) if resolve_names else _hook_text(entry, field=field)
    try:
        return Extractor(
            name=name,
            instructions=instructions,
            schema=schema,
            include_previous=_bool(entry, "includePreviousExtraction", True, field),
            metadata_key_path=_key_path(entry, field),
            on_extracted=hook if callable(hook) else None,
            context=_bool(entry, "context", False, field),
        )
    except ExtractorError as exc:
        raise ExtractorError(exc.code, exc.field.replace("extractor", field, 1), exc.detail) from None


def _hook_text(entry: Mapping[str, Any], *, field: str) -> str | None:
    """`onExtracted` checked for being a non-empty string only (config resolution)."""
    hook = entry.get("onExtracted")
    if hook is not None and (not isinstance(hook, str) or not hook.strip()):
        raise ExtractorError(
            "EXTRACTOR_INVALID_HOOK",
            f"{field}.onExtracted",
            f"onExtracted is the name of a registered callback (a string); {_REGISTER_HELP}",
            hook,
        )
    return hook


def _callback(entry: Mapping[str, Any], *, field: str, tenant: str | None) -> Callback | None:
    """The registered callback `onExtracted` names for `tenant`. Nothing is imported: a name that is not
    registered for this tenant, an import path among them, is refused with what to do instead."""
    from om_core.extractors.registry import registered_callback

    hook = entry.get("onExtracted")
    if hook is None:
        return None
    if not isinstance(hook, str) or not CALLBACK_NAME_RE.match(hook):
        raise ExtractorError(
            "EXTRACTOR_INVALID_HOOK",
            f"{field}.onExtracted",
            "onExtracted names a callback the operator registered (lower-case letters, digits, '-' and '_', "
            f"e.g. 'mark-done'); om never imports code a configuration names, such as 'module:function'; "
            f"{_REGISTER_HELP}",
            hook,
        )
    callback = registered_callback(hook, tenant)
    if callback is None:
        raise ExtractorError(
            "EXTRACTOR_HOOK_NOT_REGISTERED",
            f"{field}.onExtracted",
            f"no onExtracted callback is registered under this name; {_REGISTER_HELP}, or leave "
            "onExtracted out",
            hook,
        )
    return callback


def _from_registry(entry: Mapping[str, Any], use: str, *, field: str, tenant: str | None) -> Extractor:
    from dataclasses import replace

    from om_core.extractors.registry import registered

    base = registered(use, tenant)
    if base is None:
        raise ExtractorError(
            "EXTRACTOR_NOT_REGISTERED",
            f"{field}.use",
            "no Python extractor is registered under this name; the operator registers one with "
            "om_core.extractors.registry.register in a module listed in OM_PLUGINS",
            use,
        )
    overrides: dict[str, Any] = {}
    if "context" in entry:
        overrides["context"] = _bool(entry, "context", False, field)
    if "includePreviousExtraction" in entry:
        overrides["include_previous"] = _bool(entry, "includePreviousExtraction", True, field)
    if "metadataKeyPath" in entry:
        overrides["metadata_key_path"] = _key_path(entry, field)
        if overrides["metadata_key_path"] == "":
            overrides["metadata_key_path"] = f"extracted.{base.slug}"
    return replace(base, **overrides) if overrides else base


def _bool(entry: Mapping[str, Any], key: str, default: bool, field: str) -> bool:
    value = entry.get(key, default)
    if not isinstance(value, bool):
        raise ExtractorError("EXTRACTOR_INVALID_OPTION", f"{field}.{key}", "must be true or false", value)
    return value


def _key_path(entry: Mapping[str, Any], field: str) -> str | None:
    """`metadataKeyPath`: "" (the default `extracted.<slug>`), None for `false`, or a dotted path."""
    if "metadataKeyPath" not in entry or entry["metadataKeyPath"] is None:
        return ""
    value = entry["metadataKeyPath"]
    if value is False:
        return None
    if not isinstance(value, str) or not all(part.strip() for part in value.split(".")):
        raise ExtractorError(
            "EXTRACTOR_INVALID_KEY_PATH",
            f"{field}.metadataKeyPath",
            "must be false or a dotted path of non-empty keys, e.g. 'profile.main'",
            value,
        )
    return value


def _check_json_schema(schema: Mapping[str, Any], *, field: str) -> None:
    """A tenant's schema is data (om_core.tenancy.json_schema): local references only, RE2 patterns,
    bounded."""
    from om_core.tenancy.json_schema import SchemaRefused, check_schema

    try:
        check_schema(schema)
    except SchemaRefused as exc:
        raise ExtractorError("EXTRACTOR_INVALID_SCHEMA", exc.field(field), exc.detail) from None


def check_unique(extractors: Sequence[Extractor], *, field: str) -> None:
    """Within one list, slugs are unique (§8.2)."""
    seen: dict[str, str] = {}
    for extractor in extractors:
        if extractor.slug in seen:
            raise ExtractorError(
                "EXTRACTOR_DUPLICATE_SLUG",
                field,
                f"{seen[extractor.slug]!r} and {extractor.name!r} both give the slug {extractor.slug!r}; "
                "rename one",
            )
        seen[extractor.slug] = extractor.name


def parse_list(
    entries: Sequence[Any], *, field: str, resolve_use: bool = True, tenant: str | None = None
) -> list[Extractor]:
    """Every entry of a JSON extractor list, checked, slugs unique, its names of operator code (`use`,
    `onExtracted`) resolved for `tenant`. Config resolution passes `resolve_use=False`: those names are
    then only checked for their shape, because the process resolving a stored configuration need not have
    imported the plugins that register them, and a stored entry must resolve even when its name no longer
    does (the process running the cycle resolves it and reports a refusal, `compose`)."""
    out: list[Extractor] = []
    for index, entry in enumerate(entries):
        where = f"{field}[{index}]"
        if not isinstance(entry, Mapping):
            raise ExtractorError("EXTRACTOR_NAME_REQUIRED", where, "each extractor is an object with a name")
        if not resolve_use and "use" in entry:
            _check_use_entry(entry, field=where)
            continue
        out.append(from_json(entry, field=where, tenant=tenant, resolve_names=resolve_use))
    check_unique(out, field=field)
    return out


_USE_KEYS = frozenset({"use", "context", "includePreviousExtraction", "metadataKeyPath"})


def _check_use_entry(entry: Mapping[str, Any], *, field: str) -> None:
    use = entry.get("use")
    if not isinstance(use, str) or not use.strip():
        raise ExtractorError(
            "EXTRACTOR_NAME_REQUIRED", f"{field}.use", "use names a registered extractor", use
        )
    extra = sorted(set(entry) - _USE_KEYS)
    if extra:
        raise ExtractorError(
            "EXTRACTOR_UNKNOWN_KEY",
            f"{field}.{extra[0]}",
            "a 'use' entry may only set context, includePreviousExtraction and metadataKeyPath",
        )
    _bool(entry, "context", False, field)
    _bool(entry, "includePreviousExtraction", True, field)
    _key_path(entry, field)


def dump_value(value: Any) -> str:
    """A value as the text shown to a model or the actor: strings as they are, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def refused(entry: Any, reason: str) -> Extractor | None:
    """The stand-in of a configured entry a run cannot use: it is never run, and the run reports `reason`
    as its failure (`inline.resolve_inline`), so a tenant sees why its extractor produced nothing. None
    when the entry gives no usable slug (then the run can only log it)."""
    name = entry.get("name", entry.get("use")) if isinstance(entry, Mapping) else None
    if not isinstance(name, str):
        return None
    try:
        return Extractor(name=name, instructions="(refused)", refusal=reason)
    except ExtractorError:
        return None
