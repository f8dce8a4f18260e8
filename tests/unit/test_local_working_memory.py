"""The offline model's answer for the `working-memory` extractor (§8.7): it keeps the memory its
instructions show and adds the durable facts the user stated, in Markdown and in schema mode; with nothing
new it gives no value, so the memory is left as it is."""

from __future__ import annotations

import json

from om_core.config.options import ObservationalMemoryConfig
from om_core.extractors.structured import StructuredSpec, build_user_message
from om_core.working_memory import document as wm
from om_core.working_memory.extractor import EXTRACTOR_SLUG, extraction_schema, instructions_text
from om_local.extraction import structured_reply, working_memory_markdown

PROFILE = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}}}


def test_markdown_mode_appends_new_facts_and_keeps_the_memory() -> None:
    current = "# User\n- I am a pilot."
    sentences = ["I am a pilot.", "The weather is fine.", "I live in Porto.", "My dog is Rex."]
    assert (
        working_memory_markdown(current, sentences)
        == "# User\n- I am a pilot.\n- I live in Porto.\n- My dog is Rex."
    )
    assert working_memory_markdown(current, ["I am a pilot.", "Nice day."]) is None


def _request(current: str, transcript: str) -> str:
    cfg = ObservationalMemoryConfig.parse({"workingMemory": {"enabled": True, "schema": PROFILE}}).resolve()
    memory = wm.WorkingMemory(
        content=current,
        version=1,
        format="json",
        scope="thread",
        updated_at=None,
        updated_by="observer",
        thread_id="t",
        resource_id="r",
    )
    schema = extraction_schema(cfg.working_memory)
    assert schema is not None
    spec = StructuredSpec(EXTRACTOR_SLUG, instructions_text(cfg.working_memory, memory), schema)
    return build_user_message(transcript=transcript, output="- observed", specs=[spec], priors={})


def test_schema_mode_sets_stated_properties_over_the_current_object() -> None:
    reply = json.loads(
        structured_reply(_request('{"name": "Ada"}', "User: my city is Porto, and I like tea."))
    )
    assert reply == {EXTRACTOR_SLUG: {"name": "Ada", "city": "Porto"}}
    unchanged = _request('{"name": "Ada", "city": "Porto"}', "User: my city is Porto.")
    assert json.loads(structured_reply(unchanged)) == {}
