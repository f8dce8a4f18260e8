"""Extractors (behaviour §8, the cases of §13.11): definitions and their errors, inline and structured values,
`onExtracted`, where values persist, priors, and that a cycle without a value erases nothing.

The pure pieces are tested directly; the cycle cases run the real engine on SQLite with a scripted model
at the model boundary (the only fake), so prompts, parsing, the commit and the events are the real ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import EngineSettings, MemoryEngine
from om_core.engine import events as ev
from om_core.engine.tasks import BufferReflection, ExtractValues, new_cycle_id
from om_core.errors import OMConfigError
from om_core.extractors import compose, persist, registry
from om_core.extractors.definition import (
    ExtractedContext,
    Extractor,
    ExtractorError,
    RunContext,
    parse_list,
    slugify,
)
from om_core.extractors.inline import Extraction, InlineSpec, parse_inline
from om_core.extractors.structured import StructuredSpec, parse_reply
from om_core.messages import text_message
from om_core.store import history, records
from om_core.store.outbox import list_events
from om_core.working_memory import document as wm

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
OBSERVATIONS = "<observations>\nDate: Mar 3, 2026\n* 🔴 (09:00) User stated they like tea\n</observations>"


# --------------------------------------------------------------------------- 1. slugs and definitions


def _resolve(extract: list[dict[str, Any]]) -> None:
    ObservationalMemoryConfig.parse({"observation": {"extract": extract}}).resolve()


def _code_of(extract: list[dict[str, Any]]) -> str:
    with pytest.raises((OMConfigError, ValueError)) as caught:
        _resolve(extract)
    text = str(caught.value)
    return text.split("[", 1)[1].split("]", 1)[0]


def test_slugs_follow_the_rules() -> None:
    assert slugify("User profile") == "user-profile"
    assert slugify("Don't Stop!") == "dont-stop"
    assert Extractor(name="User profile", instructions="x").slug == "user-profile"
    assert Extractor(name="Don't Stop!", instructions="x").slug == "dont-stop"


@pytest.mark.parametrize(
    ("extract", "code"),
    [
        ([{"name": "observations", "instructions": "x"}], "EXTRACTOR_RESERVED_SLUG"),
        ([{"name": "Current task", "instructions": "x"}], "EXTRACTOR_RESERVED_SLUG"),
        (
            [{"name": "A b", "instructions": "x"}, {"name": "a-b", "instructions": "y"}],
            "EXTRACTOR_DUPLICATE_SLUG",
        ),
        ([{"name": "123abc", "instructions": "x"}], "EXTRACTOR_INVALID_SLUG"),
        ([{"name": "---", "instructions": "x"}], "EXTRACTOR_INVALID_SLUG"),
        ([{"name": "mood", "instructions": "   "}], "EXTRACTOR_INSTRUCTIONS_REQUIRED"),
        ([{"name": "  ", "instructions": "x"}], "EXTRACTOR_NAME_REQUIRED"),
        ([{"name": "mood", "instructions": "x", "schema": {"type": "nope"}}], "EXTRACTOR_INVALID_SCHEMA"),
        ([{"name": "mood", "instructions": "x", "metadataKeyPath": "a..b"}], "EXTRACTOR_INVALID_KEY_PATH"),
    ],
)
def test_a_bad_definition_is_refused_when_the_config_is_resolved(
    extract: list[dict[str, Any]], code: str
) -> None:
    assert _code_of(extract) == code


def test_errors_name_the_entry_and_say_what_to_fix() -> None:
    with pytest.raises(ExtractorError) as caught:
        parse_list(
            [{"name": "ok", "instructions": "x"}, {"name": "123abc", "instructions": "x"}],
            field="observation.extract",
        )
    assert caught.value.field == "observation.extract[1].name"
    assert "must start with a letter" in str(caught.value)


def test_python_definitions_are_checked_too_and_callables_are_resolved_per_run() -> None:
    with pytest.raises(ExtractorError) as caught:
        Extractor(name="observations", instructions="x")
    assert caught.value.code == "EXTRACTOR_RESERVED_SLUG"
    with pytest.raises(ExtractorError):
        Extractor(name="mood", instructions="")
    dynamic = Extractor(name="mood", instructions=lambda ctx: f"mood seen by the {ctx.source}")
    assert dynamic.instructions_for(RunContext("reflector")) == "mood seen by the reflector"
    empty = Extractor(name="mood", instructions=lambda ctx: " ")
    with pytest.raises(ExtractorError):
        empty.instructions_for(RunContext("observer"))


class Profile(BaseModel):
    name: str | None = None
    timezone: str | None = None


def test_a_pydantic_schema_is_a_structured_extractor_with_its_json_schema() -> None:
    extractor = Extractor(name="Profile", instructions="Profile facts.", schema=Profile)
    assert extractor.structured and extractor.metadata_key_path == "extracted.profile"
    schema = extractor.json_schema_for(RunContext("observer"))
    assert schema is not None and set(schema["properties"]) == {"name", "timezone"}
    assert not Extractor(name="mood", instructions="x").structured


# --------------------------------------------------------------------------- 2-3. inline parsing

MOOD = InlineSpec("mood", "The user's mood.", None)


def test_an_inline_tag_gives_its_value_and_the_last_occurrence_wins() -> None:
    assert parse_inline(f"{OBSERVATIONS}\n<mood>happy</mood>", [MOOD]).values == {"mood": "happy"}
    text = f"{OBSERVATIONS}\n<mood>sad</mood>\n<mood>\n  happy  \n</mood>"
    assert parse_inline(text, [MOOD]).values == {"mood": "happy"}
    assert parse_inline(OBSERVATIONS, [MOOD]) == Extraction()


def test_extracted_values_blocks_win_and_a_non_object_block_is_a_failure() -> None:
    block = '<extracted-values>{"mood": "calm", "other": 1}</extracted-values>'
    text = f"{OBSERVATIONS}\n<mood>happy</mood>\n{block}"
    assert parse_inline(text, [MOOD]).values == {"mood": "calm"}
    bad = parse_inline(f"{OBSERVATIONS}\n<extracted-values>[1, 2]</extracted-values>", [MOOD])
    assert bad.values == {} and bad.failures == [
        {"slug": "extracted-values", "error": "the block is not a JSON object"}
    ]
    null = parse_inline('<extracted-values>{"mood": null}</extracted-values>', [MOOD])
    assert null == Extraction()


def test_json_looking_content_of_a_string_extractor_falls_back_to_the_string() -> None:
    assert parse_inline("<mood>42</mood>", [MOOD]).values == {"mood": "42"}
    spec = InlineSpec("level", "A level.", {"type": "integer"})
    assert parse_inline("<level>42</level>", [spec]).values == {"level": 42}
    failed = parse_inline("<level>high</level>", [spec])
    assert failed.values == {} and failed.failures[0]["slug"] == "level"


# --------------------------------------------------------------------------- 4. structured replies

PROFILE_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "timezone": {"type": "string"}},
    "additionalProperties": False,
}


def test_a_structured_reply_keeps_valid_values_and_reports_invalid_ones() -> None:
    specs = [
        StructuredSpec("profile", "Profile facts.", PROFILE_SCHEMA),
        StructuredSpec("age", "The user's age.", {"type": "integer"}),
    ]
    reply = json.dumps({"profile": {"name": "Ada", "timezone": "Europe/London"}, "age": "old"})
    result = parse_reply(reply, specs)
    assert result.values == {"profile": {"name": "Ada", "timezone": "Europe/London"}}
    assert [f["slug"] for f in result.failures] == ["age"]
    assert parse_reply("```json\n{}\n```", specs) == Extraction()
    broken = parse_reply("not json", specs)
    assert {f["slug"] for f in broken.failures} == {"profile", "age"}


# --------------------------------------------------------------------------- 5. onExtracted


def _raise(ctx: ExtractedContext) -> Any:
    raise RuntimeError("profile service down")


def test_on_extracted_replaces_keeps_or_drops_only_its_own_value() -> None:
    seen: list[ExtractedContext] = []

    def done(ctx: ExtractedContext) -> str:
        seen.append(ctx)
        return "DONE"

    status = Extractor(name="status", instructions="x", on_extracted=done)
    broken = Extractor(name="broken", instructions="x", on_extracted=_raise)
    keep = Extractor(name="keep", instructions="x", on_extracted=lambda ctx: None)
    invalid = Extractor(name="invalid", instructions="x", on_extracted=lambda ctx: 7)
    ctx = RunContext("observer", "t1", "r1", {"extracted": {"status": "before"}})
    result = persist.apply_on_extracted(
        [status, broken, keep, invalid],
        Extraction({"status": "working", "broken": "x", "keep": "original", "invalid": "y"}),
        ctx,
    )
    assert result.values == {"status": "DONE", "keep": "original"}
    assert {"slug": "broken", "error": "profile service down"} in result.failures
    assert [f["slug"] for f in result.failures] == ["broken", "invalid"]
    assert seen[0].previous == "before" and seen[0].current == "working" and seen[0].thread_id == "t1"


# --------------------------------------------------------------------------- 6. metadataKeyPath


def test_values_land_at_their_key_path_and_false_stores_nothing() -> None:
    main = Extractor(name="profile", instructions="x", metadata_key_path="profile.main")
    mood = Extractor(name="mood", instructions="x")
    hidden = Extractor(name="hidden", instructions="x", metadata_key_path=None)
    patch = persist.metadata_patch(
        [main, mood, hidden], {"profile": {"name": "Ada"}, "mood": "calm", "hidden": "v"}
    )
    assert patch == {"profile": {"main": {"name": "Ada"}}, "extracted": {"mood": "calm"}}
    [entry] = parse_list([{"name": "hidden", "instructions": "x", "metadataKeyPath": False}], field="f")
    assert entry.metadata_key_path is None


# --------------------------------------------------------------------------- engine-level cases


@dataclass
class ScriptedModels:
    """The model boundary: Observer replies from `observer_replies` (the last one repeats), structured
    replies from `structured_reply`; every call's system prompt and user message is kept."""

    observer_replies: list[str]
    structured_reply: str = "{}"
    reflector_reply: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    formats: list[Any] = field(default_factory=list)

    def complete(self, model: Any, *, system: str, user: Any, **kwargs: Any) -> Any:
        from tests.support.fake_models import FakeCompletion, user_text

        text = user_text(user)
        if "## Observations to Reflect On" in text:
            self.calls.append(("reflector", system, text))
            reply = self.reflector_reply
        elif "## Structured Extraction Request" in text:
            self.calls.append(("structured", system, text))
            self.formats.append(kwargs.get("response_format"))
            reply = self.structured_reply
        else:
            self.calls.append(("observer", system, text))
            reply = (
                self.observer_replies[0] if len(self.observer_replies) == 1 else self.observer_replies.pop(0)
            )
        return FakeCompletion(reply, len(text) // 4, len(reply) // 4, 0.0, str(model))

    def accepts_images(self, model: str) -> bool | None:
        return None

    def of(self, kind: str) -> list[tuple[str, str, str]]:
        return [c for c in self.calls if c[0] == kind]


def _engine(
    db: Engine,
    models: ScriptedModels,
    extract: list[dict[str, Any]],
    reflect: list[dict[str, Any]] | None = None,
) -> MemoryEngine:
    config = ObservationalMemoryConfig.parse(
        {
            "observation": {"messageTokens": 200, "bufferTokens": False, "extract": extract},
            "reflection": {"extract": reflect or []},
        }
    )
    return MemoryEngine(db, models=models, config=config, settings=EngineSettings())  # type: ignore[arg-type]


def _observe_round(om: MemoryEngine, thread_id: str, start: int) -> None:
    """Enough messages to cross the threshold, so the turn observes them (the newest stays raw)."""
    for i in range(start, start + 6):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Message {i}: my name is Ada and I keep talking about tea and harbors " * 4
        om.ingest_turn(thread_id, "res-1", [text_message(f"m{i}", role, text, T0 + timedelta(minutes=i))])


def _ends(db: Engine, thread_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.payload for e in list_events(db, thread_id=thread_id, limit=10_000) if e.type == kind]


def _meta(db: Engine, thread_id: str) -> dict[str, Any]:
    thread = history.get_thread(db, thread_id)
    assert thread is not None
    return thread.om_metadata


@pytest.fixture
def mood_models() -> Iterator[ScriptedModels]:
    yield ScriptedModels([f"{OBSERVATIONS}\n<current-task>tea</current-task>\n<mood>happy</mood>"])


def test_an_inline_value_is_persisted_reported_and_never_in_the_log(
    sqlite_engine: Engine, mood_models: ScriptedModels
) -> None:
    om = _engine(sqlite_engine, mood_models, [{"name": "mood", "instructions": "The user's mood."}])
    _observe_round(om, "t-inline", 0)
    [system] = {c[1] for c in mood_models.of("observer")}
    assert "<mood> ... </mood>: The user's mood." in system
    head = records.get_head(sqlite_engine, "thread:t-inline")
    assert head is not None and "tea" in head.active_observations
    assert "<mood>" not in head.active_observations and "happy" not in head.active_observations
    # The built-in value is under `extracted.<slug>` too, and keeps its compatibility field (§8.3).
    assert _meta(sqlite_engine, "t-inline")["extracted"] == {"current-task": "tea", "mood": "happy"}
    assert _meta(sqlite_engine, "t-inline")["currentTask"] == "tea"
    [end, *_] = _ends(sqlite_engine, "t-inline", ev.OBSERVATION_END)
    assert end["extractedValues"] == {"current-task": "tea", "mood": "happy"}
    assert "extractionFailures" not in end


def test_a_tag_inside_the_observations_block_is_stripped_too(sqlite_engine: Engine) -> None:
    inside = OBSERVATIONS.replace("</observations>", "<mood>happy</mood>\n</observations>")
    models = ScriptedModels([inside])
    om = _engine(sqlite_engine, models, [{"name": "mood", "instructions": "The user's mood."}])
    _observe_round(om, "t-inside", 0)
    head = records.get_head(sqlite_engine, "thread:t-inside")
    assert head is not None and "tea" in head.active_observations and "happy" not in head.active_observations
    assert _meta(sqlite_engine, "t-inside")["extracted"] == {"mood": "happy"}


def test_a_structured_extractor_reports_its_values_on_the_observation_end(sqlite_engine: Engine) -> None:
    """§8.5/§8.6.4: the follow-up call is made in the cycle, so its values are persisted with the
    observation and reported in `extractedValues` of its `data-om-observation-end`, as the original
    documents; no separate extraction event."""
    models = ScriptedModels(
        [OBSERVATIONS],
        structured_reply=json.dumps({"profile": {"name": "Ada", "timezone": 5}, "mood": "calm"}),
    )
    profile = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "timezone": {"type": "string"}},
    }
    om = _engine(
        sqlite_engine,
        models,
        [
            {"name": "profile", "instructions": "Profile facts.", "schema": profile},
            {"name": "mood", "instructions": "The mood.", "schema": {"type": "string"}},
        ],
    )
    _observe_round(om, "t-struct", 0)
    structured = models.of("structured")
    assert structured, "a structured extractor makes a follow-up call"
    user = structured[0][2]
    assert "- profile: Profile facts." in user and "Message 0" in user and "User stated they like tea" in user
    assert models.formats[0]["json_schema"]["schema"]["properties"]["profile"] == profile
    meta = _meta(sqlite_engine, "t-struct")
    assert meta["extracted"] == {"mood": "calm"}, "the invalid profile is dropped, the other value kept"
    [end, *_] = _ends(sqlite_engine, "t-struct", ev.OBSERVATION_END)
    assert end["extractedValues"] == {"mood": "calm"}
    assert (
        end["extractionFailures"][0]["slug"] == "profile"
        and "timezone" in end["extractionFailures"][0]["error"]
    )
    assert not _ends(sqlite_engine, "t-struct", ev.EXTRACTION_END)
    assert not [t for t in om.executor.submitted if type(t).__name__ == "ExtractValues"]  # type: ignore[attr-defined]


def test_a_failing_structured_call_is_the_extractors_failure_not_the_cycles(sqlite_engine: Engine) -> None:
    class Down(ScriptedModels):
        def complete(self, model: Any, *, system: str, user: Any, **kwargs: Any) -> Any:
            from tests.support.fake_models import user_text

            if "## Structured Extraction Request" in user_text(user):
                raise RuntimeError("extraction provider down")
            return super().complete(model, system=system, user=user, **kwargs)

    models = Down([f"{OBSERVATIONS}\n<mood>happy</mood>"])
    om = _engine(
        sqlite_engine,
        models,
        [
            {"name": "mood", "instructions": "Mood."},
            {"name": "status", "instructions": "Status.", "schema": {"type": "string"}},
        ],
    )
    _observe_round(om, "t-down", 0)
    head = records.get_head(sqlite_engine, "thread:t-down")
    assert head is not None and "tea" in head.active_observations, "the observation committed"
    [end, *_] = _ends(sqlite_engine, "t-down", ev.OBSERVATION_END)
    assert end["extractedValues"] == {"mood": "happy"}
    assert [f["slug"] for f in end["extractionFailures"]] == ["status"]


def test_an_extraction_task_queued_by_an_earlier_version_is_applied_once(sqlite_engine: Engine) -> None:
    models = ScriptedModels([OBSERVATIONS], structured_reply=json.dumps({"mood": "calm"}))
    om = _engine(
        sqlite_engine, models, [{"name": "mood", "instructions": "The mood.", "schema": {"type": "string"}}]
    )
    _observe_round(om, "t-once", 0)
    [source] = [e for e in list_events(sqlite_engine, thread_id="t-once") if e.type == ev.OBSERVATION_END][:1]
    head = records.get_head(sqlite_engine, "thread:t-once")
    assert head is not None
    task = ExtractValues("t-once", f"extract-{source.cycle_id}", "observer", source.cycle_id, head.id, 0, 1)
    calls = len(models.of("structured"))
    assert om.extract_values(task) is True
    assert om.extract_values(task) is False
    assert len(models.of("structured")) == calls + 1
    assert len(_ends(sqlite_engine, "t-once", ev.EXTRACTION_END)) == 1


@pytest.fixture
def callbacks() -> Iterator[None]:
    """`onExtracted` callbacks registered by name, as a plugin module would."""
    registry.register_callback("mark-done", _done)
    registry.register_callback("profile-down", _raise)
    try:
        yield
    finally:
        registry.unregister_callback("mark-done")
        registry.unregister_callback("profile-down")


def test_on_extracted_done_is_persisted_and_a_raising_hook_spares_the_others(
    sqlite_engine: Engine, callbacks: None
) -> None:
    models = ScriptedModels([f"{OBSERVATIONS}\n<status>working</status>\n<mood>happy</mood>"])
    om = _engine(
        sqlite_engine,
        models,
        [
            {"name": "status", "instructions": "Status.", "onExtracted": "mark-done"},
            {"name": "mood", "instructions": "Mood."},
            {"name": "broken", "instructions": "Broken.", "onExtracted": "profile-down"},
        ],
    )
    models.observer_replies = [
        f"{OBSERVATIONS}\n<status>working</status>\n<mood>happy</mood>\n<broken>x</broken>"
    ]
    _observe_round(om, "t-hook", 0)
    assert _meta(sqlite_engine, "t-hook")["extracted"] == {"status": "DONE", "mood": "happy"}
    [end, *_] = _ends(sqlite_engine, "t-hook", ev.OBSERVATION_END)
    assert end["extractionFailures"] == [{"slug": "broken", "error": "profile service down"}]


def test_an_import_path_in_on_extracted_is_refused_and_reported_never_imported(sqlite_engine: Engine) -> None:
    """A config stored before callbacks were named still resolves, but its entry never runs: no import, no
    value, a failure on the end event saying why; the other extractors and the cycle go on."""
    models = ScriptedModels([f"{OBSERVATIONS}\n<status>working</status>\n<mood>happy</mood>"])
    om = _engine(
        sqlite_engine,
        models,
        [
            {"name": "status", "instructions": "Status.", "onExtracted": "tests.unit.test_extractors:_done"},
            {"name": "mood", "instructions": "Mood."},
        ],
    )
    _observe_round(om, "t-path-hook", 0)
    assert _meta(sqlite_engine, "t-path-hook")["extracted"] == {"mood": "happy"}
    [end, *_] = _ends(sqlite_engine, "t-path-hook", ev.OBSERVATION_END)
    [failure] = end["extractionFailures"]
    assert failure["slug"] == "status" and "EXTRACTOR_INVALID_HOOK" in failure["error"]
    assert "register_callback" in failure["error"]
    observer_prompts = " ".join(system for kind, system, _text in models.calls if kind == "observer")
    assert "<status>" not in observer_prompts and "<mood>" in observer_prompts, (
        "a refused entry is not asked for"
    )


def _done(ctx: ExtractedContext) -> str:
    return "DONE"


def test_a_key_path_stores_there_and_false_still_reports(sqlite_engine: Engine) -> None:
    models = ScriptedModels([f"{OBSERVATIONS}\n<profile>Ada</profile>\n<scratch>note</scratch>"])
    om = _engine(
        sqlite_engine,
        models,
        [
            {"name": "profile", "instructions": "Profile.", "metadataKeyPath": "profile.main"},
            {"name": "scratch", "instructions": "Scratch.", "metadataKeyPath": False},
        ],
    )
    _observe_round(om, "t-path", 0)
    meta = _meta(sqlite_engine, "t-path")
    assert meta["profile"] == {"main": "Ada"} and "extracted" not in meta
    [end, *_] = _ends(sqlite_engine, "t-path", ev.OBSERVATION_END)
    assert end["extractedValues"] == {"profile": "Ada", "scratch": "note"}


def test_priors_are_shown_unless_include_previous_is_false(sqlite_engine: Engine) -> None:
    models = ScriptedModels([f"{OBSERVATIONS}\n<mood>happy</mood>\n<blocker>the VPN</blocker>"])
    om = _engine(
        sqlite_engine,
        models,
        [
            {"name": "mood", "instructions": "Mood."},
            {"name": "blocker", "instructions": "Blockers.", "includePreviousExtraction": False},
        ],
    )
    _observe_round(om, "t-prior", 0)
    first = len(models.of("observer"))
    assert "<mood>" not in models.of("observer")[0][2]
    _observe_round(om, "t-prior", 6)
    later = [c[2] for c in models.of("observer")[first:]]
    assert later, "the second round observes again"
    assert "<mood>\nhappy\n</mood>" in later[0]
    assert "the VPN" not in later[0]


def test_a_cycle_without_a_value_does_not_erase_the_stored_one(sqlite_engine: Engine) -> None:
    models = ScriptedModels([f"{OBSERVATIONS}\n<mood>happy</mood>"])
    om = _engine(sqlite_engine, models, [{"name": "mood", "instructions": "Mood."}])
    _observe_round(om, "t-keep", 0)
    assert _meta(sqlite_engine, "t-keep")["extracted"] == {"mood": "happy"}
    models.observer_replies = [OBSERVATIONS]
    before = len(models.of("observer"))
    _observe_round(om, "t-keep", 6)
    assert len(models.of("observer")) > before
    assert _meta(sqlite_engine, "t-keep")["extracted"] == {"mood": "happy"}


def test_context_true_values_reach_the_actor_after_the_stable_prefix(sqlite_engine: Engine) -> None:
    models = ScriptedModels([f"{OBSERVATIONS}\n<mood>happy</mood>"])
    om = _engine(sqlite_engine, models, [{"name": "mood", "instructions": "Mood.", "context": True}])
    _observe_round(om, "t-ctx", 0)
    result = om.ingest_turn("t-ctx", "res-1", [text_message("m99", "user", "hi", T0 + timedelta(hours=1))])
    stable = result.system_messages[: result.context.stable_count]
    volatile = result.system_messages[result.context.stable_count :]
    assert not any("happy" in m for m in stable)
    assert any("<mood>" in m and "happy" in m for m in volatile)


# --------------------------------------------------------------------------- 9. the working-memory seam


def test_the_observer_writes_working_memory_through_its_extractor(sqlite_engine: Engine) -> None:
    """§8.7, §13.11.9: with `manageWorkingMemory` and a Markdown working memory, the Observer's run carries
    the inline `working-memory` extractor (`metadataKeyPath: false`); its value is written through the
    working-memory store, nothing lands in OM metadata, and the section never reaches the log."""
    models = ScriptedModels([f"{OBSERVATIONS}\n<working-memory>\n# Name\nAda\n</working-memory>"])
    config = ObservationalMemoryConfig.parse(
        {
            "observation": {"messageTokens": 200, "bufferTokens": False, "manageWorkingMemory": True},
            "workingMemory": {"enabled": True, "scope": "thread", "template": "# Name\n"},
        }
    )
    om = MemoryEngine(sqlite_engine, models=models, config=config, settings=EngineSettings())  # type: ignore[arg-type]
    _observe_round(om, "t-wm", 0)
    observer_systems = [system for kind, system, _text in models.calls if kind == "observer"]
    assert observer_systems and "<working-memory>" in observer_systems[0], "the Observer was asked for it"
    cfg = om.thread_config("t-wm")
    thread = history.get_thread(sqlite_engine, "t-wm")
    assert thread is not None
    memory = wm.read(sqlite_engine, wm.target_for_thread(thread, cfg), cfg)
    assert (memory.content, memory.version) == ("# Name\nAda", 1)
    meta = _meta(sqlite_engine, "t-wm")
    assert "extracted" not in meta and "working-memory" not in json.dumps(meta)
    head = records.get_head(sqlite_engine, "thread:t-wm")
    assert head is not None and "# Name" not in head.active_observations
    assert (
        compose.working_memory_extractor(cfg, RunContext("reflector", "t-wm", memory=sqlite_engine)) is None
    )


def test_a_registered_python_extractor_is_used_by_name() -> None:
    extractor = registry.register(Extractor(name="User profile", instructions="Profile.", schema=Profile))
    try:
        [used] = parse_list([{"use": "user-profile", "context": True}], field="observation.extract")
        assert used.schema is Profile and used.context and used.slug == "user-profile"
        _resolve([{"use": "not-registered-here"}])  # resolving a config checks names for shape only
        with pytest.raises(ExtractorError) as caught:
            parse_list([{"use": "nobody"}], field="observation.extract")
        assert caught.value.code == "EXTRACTOR_NOT_REGISTERED"
    finally:
        registry.unregister(extractor.name)


def test_the_reflector_runs_reflection_extractors_and_strips_their_sections(sqlite_engine: Engine) -> None:
    long_log = OBSERVATIONS.replace(
        "</observations>",
        "\n".join(f"* 🟡 (09:0{i}) User mentioned harbor number {i} and its lantern" for i in range(6))
        + "\n</observations>",
    )
    models = ScriptedModels(
        [long_log],
        reflector_reply=f"{OBSERVATIONS}\n<mood>calm</mood>",
        structured_reply=json.dumps({"topics": ["tea"]}),
    )
    om = _engine(
        sqlite_engine,
        models,
        [],
        reflect=[
            {"name": "mood", "instructions": "The user's mood."},
            {
                "name": "topics",
                "instructions": "Topics.",
                "schema": {"type": "array", "items": {"type": "string"}},
            },
        ],
    )
    _observe_round(om, "t-refl", 0)
    assert "<mood>" not in models.of("observer")[0][1], "reflection extractors are not the Observer's"
    assert om.reflect_now("t-refl").applied
    [reflector_call, *_] = models.of("reflector")
    assert "<mood> ... </mood>: The user's mood." in reflector_call[1]
    head = records.get_head(sqlite_engine, "thread:t-refl")
    assert head is not None and "tea" in head.active_observations and "calm" not in head.active_observations
    assert _meta(sqlite_engine, "t-refl")["extracted"] == {"mood": "calm", "topics": ["tea"]}
    reflection_end = [
        e for e in _ends(sqlite_engine, "t-refl", ev.OBSERVATION_END) if e["operationType"] == "reflection"
    ]
    assert reflection_end[0]["extractedValues"] == {"mood": "calm", "topics": ["tea"]}
    assert not _ends(sqlite_engine, "t-refl", ev.EXTRACTION_END)


def test_a_buffered_reflection_runs_reflection_extractors_and_persists_before_activation(
    sqlite_engine: Engine,
) -> None:
    """§8.6.4 for the Reflector: a buffered reflection's inline values persist when it is stored, though
    the reflection itself waits for activation; its section never reaches the stored reflection."""
    long_log = OBSERVATIONS.replace(
        "</observations>",
        "\n".join(f"* 🟡 (09:0{i}) User mentioned harbor number {i} and its lantern" for i in range(6))
        + "\n</observations>",
    )
    models = ScriptedModels(
        [long_log], reflector_reply="<observations>\n* 🟡 (09:00) harbors\n</observations>\n<mood>calm</mood>"
    )
    config = ObservationalMemoryConfig.parse(
        {
            "observation": {"messageTokens": 200},
            "reflection": {
                "observationTokens": 100_000,
                "bufferActivation": 0.5,
                "extract": [{"name": "mood", "instructions": "The user's mood."}],
            },
        }
    )
    om = MemoryEngine(sqlite_engine, models=models, config=config, settings=EngineSettings())  # type: ignore[arg-type]
    _observe_round(om, "t-buf-refl", 0)
    head = records.get_head(sqlite_engine, "thread:t-buf-refl")
    assert head is not None and head.active_observations
    assert om.run_task(BufferReflection("t-buf-refl", head.id, new_cycle_id("buffer-refl")))
    [reflector_call] = models.of("reflector")
    assert "<mood> ... </mood>: The user's mood." in reflector_call[1]
    stored = records.get_head(sqlite_engine, "thread:t-buf-refl")
    assert stored is not None and stored.buffered_reflection and "calm" not in stored.buffered_reflection
    assert _meta(sqlite_engine, "t-buf-refl")["extracted"] == {"mood": "calm"}
    [end] = [
        e for e in _ends(sqlite_engine, "t-buf-refl", ev.BUFFERING_END) if e["operationType"] == "reflection"
    ]
    assert end["extractedValues"] == {"mood": "calm"}


@dataclass
class ThreadBlocksModel:
    """A multi-thread Observer: one block per `<thread id>` of the prompt, each with its own `<mood>`."""

    moods: dict[str, str]
    systems: list[str] = field(default_factory=list)

    def complete(self, model: Any, *, system: str, user: Any, **kwargs: Any) -> Any:
        import re

        from tests.support.fake_models import FakeCompletion, user_text

        text = user_text(user)
        self.systems.append(system)
        found = re.findall(r'<thread id="([^"]+)">', text.split("## New Message History")[-1])
        ids = [i for i in dict.fromkeys(found) if i in self.moods]
        blocks = [
            f'<thread id="{i}">\nDate: Mar 3, 2026\n* 🔴 (09:00) User talked in {i}\n'
            f"<mood>{self.moods[i]}</mood>\n</thread>"
            for i in ids
        ]
        reply = "<observations>\n" + "\n".join(blocks) + "\n</observations>"
        return FakeCompletion(reply, len(text) // 4, len(reply) // 4, 0.0, str(model))

    def accepts_images(self, model: str) -> bool | None:
        return None


def test_a_multi_thread_batch_gives_each_thread_its_own_inline_value(sqlite_engine: Engine) -> None:
    models = ThreadBlocksModel({"t-ra": "happy", "t-rb": "tired"})
    config = ObservationalMemoryConfig.parse(
        {
            "scope": "resource",
            "obscureThreadIds": False,
            "observation": {"messageTokens": 200, "extract": [{"name": "mood", "instructions": "Mood."}]},
        }
    )
    om = MemoryEngine(sqlite_engine, models=models, config=config, settings=EngineSettings())  # type: ignore[arg-type]
    for i in range(6):
        for thread in ("t-ra", "t-rb"):
            text = f"Message {i} in {thread}: harbors, lanterns and copper kettles " * 4
            role = "user" if i % 2 == 0 else "assistant"
            om.ingest_turn(
                thread, "res-shared", [text_message(f"{thread}-m{i}", role, text, T0 + timedelta(minutes=i))]
            )
    assert any('<thread id="' in s and "Inside each thread block" in s for s in models.systems)
    assert _meta(sqlite_engine, "t-ra")["extracted"] == {"mood": "happy"}
    assert _meta(sqlite_engine, "t-rb")["extracted"] == {"mood": "tired"}
    shared = records.get_head(sqlite_engine, "resource:res-shared")
    assert shared is not None and "User talked in" in shared.active_observations
    assert "<mood>" not in shared.active_observations and "happy" not in shared.active_observations
    ends = _ends(sqlite_engine, "t-rb", ev.OBSERVATION_END)
    assert any(e.get("extractedValues") == {"mood": "tired"} for e in ends)
