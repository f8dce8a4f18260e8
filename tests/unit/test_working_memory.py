"""Working memory without a database (behaviour §8.7): the `workingMemory` config block and its defaults, what
content is accepted, where the memory sits in the actor's context, the actor's tool, and the rules of the
Observer-managed `working-memory` extractor (instructions, nullable schema)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from om_core.config.options import WORKING_MEMORY_OFF, ObservationalMemoryConfig
from om_core.context.actor import build_actor_context
from om_core.errors import OMConfigError
from om_core.working_memory import document as wm
from om_core.working_memory.extractor import extraction_schema, instructions_text

PROFILE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "city": {"type": "string"}, "age": {"type": "integer"}},
    "additionalProperties": False,
}


def _wm(value: dict[str, Any], **observation: Any) -> Any:
    options: dict[str, Any] = {"workingMemory": value}
    if observation:
        options["observation"] = observation
    return ObservationalMemoryConfig.parse(options).resolve().working_memory


# ------------------------------------------------------------------------------------------ config


def test_working_memory_is_off_by_default() -> None:
    assert ObservationalMemoryConfig.parse(True).resolve().working_memory == WORKING_MEMORY_OFF


def test_defaults_when_enabled_follow_who_manages_the_memory() -> None:
    actor = _wm({"enabled": True})
    assert (actor.scope, actor.format, actor.template, actor.schema) == ("resource", "markdown", None, None)
    assert (actor.agent_managed, actor.use_state_signals, actor.observer_managed) == (True, False, False)

    observer = _wm({"enabled": True}, manageWorkingMemory=True)
    assert (observer.agent_managed, observer.use_state_signals, observer.observer_managed) == (
        False,
        True,
        True,
    ), "§8.7: manageWorkingMemory turns agentManaged off and useStateSignals on by default"

    both = _wm({"enabled": True, "agentManaged": True, "useStateSignals": False}, manageWorkingMemory=True)
    assert (both.agent_managed, both.use_state_signals, both.observer_managed) == (True, False, True)

    schema = _wm({"enabled": True, "scope": "thread", "schema": PROFILE})
    assert (schema.scope, schema.format, schema.schema) == ("thread", "json", PROFILE)


def test_manage_working_memory_without_working_memory_is_ignored_with_a_warning() -> None:
    rc = ObservationalMemoryConfig.parse({"observation": {"manageWorkingMemory": True}}).resolve()
    assert rc.working_memory == WORKING_MEMORY_OFF
    assert any("manageWorkingMemory" in w for w in rc.warnings)


@pytest.mark.parametrize(
    ("block", "code", "field"),
    [
        (
            {"template": "# T", "schema": PROFILE},
            "WORKING_MEMORY_TEMPLATE_AND_SCHEMA",
            "workingMemory.schema",
        ),
        ({"template": "  "}, "WORKING_MEMORY_TEMPLATE_EMPTY", "workingMemory.template"),
        ({"schema": {"type": "nope"}}, "WORKING_MEMORY_SCHEMA_INVALID", "workingMemory.schema.type"),
        ({"schema": {"type": "string"}}, "WORKING_MEMORY_SCHEMA_INVALID", "workingMemory.schema"),
        ({"enabeld": True}, "UNKNOWN_OPTION", "workingMemory.enabeld"),
    ],
)
def test_invalid_blocks_fail_naming_the_field(block: dict[str, Any], code: str, field: str) -> None:
    with pytest.raises(OMConfigError) as raised:
        ObservationalMemoryConfig.parse({"workingMemory": {"enabled": True, **block}})
    assert raised.value.code == code
    assert raised.value.field == field
    assert field in str(raised.value)


def test_the_block_merges_key_by_key_and_round_trips() -> None:
    base = ObservationalMemoryConfig.parse({"workingMemory": {"enabled": True, "scope": "thread"}})
    merged = base.with_overrides({"workingMemory": {"template": "# Notes\n- "}})
    resolved = merged.resolve().working_memory
    assert (resolved.enabled, resolved.scope, resolved.template) == (True, "thread", "# Notes\n- ")
    assert ObservationalMemoryConfig.parse(merged.to_public_dict()).resolve() == merged.resolve()


# ----------------------------------------------------------------------------------------- content


def test_markdown_content_is_text_within_the_size_limit() -> None:
    cfg = _wm({"enabled": True})
    assert wm.parse_content(cfg, "# User\n- Name: Ada") == "# User\n- Name: Ada"
    with pytest.raises(wm.WorkingMemoryInvalid, match="string of Markdown"):
        wm.parse_content(cfg, {"name": "Ada"})
    with pytest.raises(wm.WorkingMemoryInvalid, match="at most"):
        wm.parse_content(cfg, "x" * (wm.MAX_CONTENT_BYTES + 1))
    with pytest.raises(wm.WorkingMemoryInvalid, match="NUL"):
        wm.parse_content(cfg, "a\x00b")


def test_schema_content_is_an_object_valid_against_the_schema() -> None:
    cfg = _wm({"enabled": True, "schema": PROFILE})
    assert json.loads(wm.parse_content(cfg, {"name": "Ada", "age": 36})) == {"name": "Ada", "age": 36}
    assert json.loads(wm.parse_content(cfg, '{"city": "Oslo"}')) == {"city": "Oslo"}
    with pytest.raises(wm.WorkingMemoryInvalid, match="at age: 'old' is not of type 'integer'"):
        wm.parse_content(cfg, {"name": "Ada", "age": "old"})
    with pytest.raises(wm.WorkingMemoryInvalid, match="Additional properties"):
        wm.parse_content(cfg, {"shoe": 42})
    with pytest.raises(wm.WorkingMemoryInvalid, match="not JSON"):
        wm.parse_content(cfg, "{name: Ada")
    with pytest.raises(wm.WorkingMemoryInvalid, match="one JSON object"):
        wm.parse_content(cfg, [1, 2])


# ------------------------------------------------------------------------------------ actor context

LOG = "Date: Mar 3, 2026\n* 🔴 (09:12) User stated their team deploys on Fridays only"
NOW = datetime(2026, 3, 10, 8, 0, tzinfo=UTC)


def _memory(content: str, version: int = 1) -> wm.WorkingMemory:
    return wm.WorkingMemory("resource", "markdown", content, version, NOW, "api", None, "u")


def _context(memory: wm.WorkingMemory | None, signal: bool, agent: bool, observations: str = LOG) -> Any:
    cfg = _wm({"enabled": True, "agentManaged": agent, "useStateSignals": signal})
    return build_actor_context(
        active_observations=observations,
        current_task="Primary: write the deploy doc",
        suggested_response=None,
        now=NOW,
        tz="UTC",
        has_unobserved_history=True,
        working_memory=wm.actor_messages(memory, cfg) if memory is not None else (),
        working_memory_as_signal=signal,
    )


@pytest.mark.parametrize("signal", [True, False])
def test_the_memory_never_enters_the_stable_prefix(signal: bool) -> None:
    without = _context(None, signal, agent=False)
    before = _context(_memory("- Name: Ada"), signal, agent=False)
    after = _context(_memory("- Name: Ada\n- City: Oslo", 2), signal, agent=False)
    stable = without.system_messages[: without.stable_count]
    for ctx in (before, after):
        assert ctx.system_messages[: ctx.stable_count] == stable, "byte-identical prefix"
        assert ctx.stable_count == without.stable_count
    volatile = after.system_messages[after.stable_count :]
    memory_at = next(i for i, m in enumerate(volatile) if "<working-memory>" in m)
    task_at = next(i for i, m in enumerate(volatile) if "<current-task>" in m)
    assert "- City: Oslo" in volatile[memory_at]
    # A state signal comes after every other memory message; otherwise the memory leads the volatile part.
    assert (memory_at > task_at) if signal else (memory_at < task_at)
    assert after.continuation_reminder == without.continuation_reminder


def test_the_memory_is_shown_before_the_first_observation_without_a_reminder() -> None:
    ctx = _context(_memory("- Name: Ada"), signal=True, agent=False, observations="")
    assert ctx.stable_count == 0
    assert len(ctx.system_messages) == 1 and "- Name: Ada" in ctx.system_messages[0]
    assert ctx.continuation_reminder == ""


def test_an_agent_managed_memory_comes_with_its_instruction_and_tool() -> None:
    managed = _context(_memory("- Name: Ada"), signal=False, agent=True)
    unmanaged = _context(_memory("- Name: Ada"), signal=False, agent=False)
    assert any(wm.UPDATE_TOOL_NAME in m for m in managed.system_messages)
    assert not any(wm.UPDATE_TOOL_NAME in m for m in unmanaged.system_messages)

    markdown = wm.update_tool(_wm({"enabled": True}))
    assert markdown["function"]["name"] == "updateWorkingMemory"
    assert markdown["function"]["parameters"]["properties"]["content"]["type"] == "string"
    schema = wm.update_tool(_wm({"enabled": True, "schema": PROFILE}))
    assert schema["function"]["parameters"]["properties"]["content"] == PROFILE
    assert schema["function"]["parameters"]["required"] == ["content"]


# --------------------------------------------------------------------------- the Observer's extractor


def test_markdown_mode_is_an_inline_string_extractor_shown_the_template_and_the_memory() -> None:
    cfg = _wm({"enabled": True, "template": "# Profile\n- Name:\n- Diet:"}, manageWorkingMemory=True)
    assert extraction_schema(cfg) is None, "no schema: an inline string extractor"
    text = instructions_text(cfg, _memory("# Profile\n- Name: Ada\n- Diet:"))
    assert "durable facts from the new observations" in text
    assert "# Profile\n- Name:\n- Diet:" in text, "the template"
    assert "- Name: Ada" in text, "the current memory"
    assert "Markdown" in text and "leave this value out" in text


def test_schema_mode_is_a_structured_extractor_with_the_schema_made_nullable() -> None:
    cfg = _wm({"enabled": True, "schema": PROFILE}, manageWorkingMemory=True)
    nullable = extraction_schema(cfg)
    assert nullable == {"anyOf": [PROFILE, {"type": "null"}]}
    from jsonschema import validate

    validate(None, nullable)
    validate({"name": "Ada"}, nullable)
    text = instructions_text(
        cfg, wm.WorkingMemory("resource", "json", '{"name":"Ada"}', 3, NOW, "api", None, "u")
    )
    assert json.dumps(PROFILE) in text and '{"name":"Ada"}' in text
    assert "null when no update is needed" in text
