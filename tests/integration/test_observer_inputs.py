"""What the Observer is given and what its answer changes, driven through `MemoryEngine`.

- `observeAttachments` (§5.5): images and files reach the Observer model as content parts through
  `ModelClient` and litellm, filtered by the option; the model boundary is a recording litellm provider
  (`tests/support/recording_provider.py`), so what is asserted is what a provider would receive.
- `ModelByInputTokens` (§11.1, §13.15): the tier the input size selects is the model called, and an input
  above the largest tier fails the cycle with `MODEL_TIER_EXCEEDED`, which the turn reports.
- `observation.threadTitle` (§5.6, §10.1): a title the Observer proposes becomes the thread's title with a
  stored `data-om-thread-update` event, unless it is too short or unchanged, in blocking and buffered
  observation alike.
"""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import MemoryEngine, TurnResult
from om_core.engine.events import OBSERVATION_FAILED, THREAD_UPDATE
from om_core.messages import Message, Part, text_message
from om_core.models.client import ModelClient
from om_core.store import history
from om_core.store.outbox import list_events
from om_core.store.types import StoredEvent
from tests.support import recording_provider
from tests.support.fake_models import FakeModels
from tests.support.invariants import check_thread

T0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
PDF_B64 = base64.b64encode(b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF").decode()
PNG_URI = f"data:image/png;base64,{PNG_B64}"
PDF_URI = f"data:application/pdf;base64,{PDF_B64}"
IMAGE_PLACEHOLDER = "[Image #1: receipt.png]"
FILE_PLACEHOLDER = "[File #1: contract.pdf]"
#: Most turns a scenario may take before its first Observer call; reached only when observation never runs.
MAX_TURNS = 40


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def filler(i: int) -> Message:
    words = " ".join(f"{w}{i}" for w in ("harbor", "lantern", "copper", "meadow", "signal") * 20)
    role = "assistant" if i % 2 else "user"
    return text_message(f"m{i}", role, f"Message {i}: {words}", T0 + timedelta(minutes=i))


def with_attachments() -> Message:
    """A user message holding an image and a PDF, both inline (base64), before any filler."""
    return Message(
        id="m0",
        role="user",
        parts=[
            Part(type="text", text="Here are the receipt and the signed contract."),
            Part(type="image", data=PNG_B64, mime_type="image/png", filename="receipt.png"),
            Part(type="file", data=PDF_B64, mime_type="application/pdf", filename="contract.pdf"),
        ],
        created_at=T0,
    )


def attachment_config(model: str, observe_attachments: Any) -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(
        {
            "observation": {
                "model": model,
                "messageTokens": 1000,
                "bufferTokens": False,
                "observeAttachments": observe_attachments,
            },
            "reflection": {"model": model, "observationTokens": 50_000},
        }
    )


def first_observer_content(db: Engine, model: str, observe_attachments: Any) -> Any:
    """Play the message with attachments, then filler until the Observer is called; the user content of
    that first call as the provider received it."""
    om = MemoryEngine(db, models=ModelClient(), config=attachment_config(model, observe_attachments))
    thread_id = new_thread()
    before = len(recording_provider.calls(model))
    om.ingest_turn(thread_id, "res-1", [with_attachments()])
    for i in range(1, MAX_TURNS):
        om.ingest_turn(thread_id, "res-1", [filler(i)])
        made = recording_provider.calls(model)[before:]
        if made:
            assert check_thread(db, thread_id).violations == []
            return recording_provider.user_content(made[0])
    raise AssertionError(f"no Observer call in {MAX_TURNS} turns")


def kinds(content: Any) -> list[str]:
    return [part["type"] for part in content] if isinstance(content, list) else ["plain"]


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part["text"] for part in content if part["type"] == "text")


def model_name(label: str) -> str:
    """A recording model of its own per test (no capability data), so calls of two tests never mix."""
    return f"{recording_provider.PROVIDER}/{label}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------------------------ observeAttachments


def test_with_observe_attachments_true_the_image_and_the_pdf_follow_their_message(
    sqlite_engine: Engine,
) -> None:
    content = first_observer_content(sqlite_engine, model_name("all"), True)
    assert kinds(content) == ["text", "image_url", "file", "text"]
    before, image, file, after = content
    assert image["image_url"]["url"] == PNG_URI
    assert file["file"] == {"file_data": PDF_URI, "filename": "contract.pdf", "format": "application/pdf"}
    # Right after the lines of their message: the text before them ends with that message, the filler
    # the Observer also sees comes after them.
    assert before["text"].rstrip().endswith(f"File: {FILE_PLACEHOLDER}")
    assert IMAGE_PLACEHOLDER in before["text"] and "Message 1:" not in before["text"]
    assert "Message 1:" in after["text"] and "## Your Task" in after["text"]


def test_with_observe_attachments_false_only_the_placeholders_reach_the_model(sqlite_engine: Engine) -> None:
    content = first_observer_content(sqlite_engine, model_name("none"), False)
    assert isinstance(content, str)
    assert IMAGE_PLACEHOLDER in content and FILE_PLACEHOLDER in content
    assert PNG_B64 not in content and PDF_B64 not in content


def test_an_image_pattern_forwards_the_image_and_not_the_pdf(sqlite_engine: Engine) -> None:
    content = first_observer_content(sqlite_engine, model_name("images"), ["image/*"])
    assert kinds(content) == ["text", "image_url", "text"]
    assert content[1]["image_url"]["url"] == PNG_URI
    assert FILE_PLACEHOLDER in text_of(content), "a file not forwarded keeps its placeholder"


def test_auto_forwards_nothing_to_a_model_litellm_lists_without_vision(sqlite_engine: Engine) -> None:
    content = first_observer_content(sqlite_engine, recording_provider.BLIND, "auto")
    assert isinstance(content, str)
    assert IMAGE_PLACEHOLDER in content and FILE_PLACEHOLDER in content


@pytest.mark.parametrize("model", [recording_provider.SIGHTED, "unlisted"])
def test_auto_forwards_everything_to_a_vision_model_or_one_litellm_does_not_know(
    sqlite_engine: Engine, model: str
) -> None:
    name = model if model != "unlisted" else model_name("unlisted")
    content = first_observer_content(sqlite_engine, name, "auto")
    assert kinds(content) == ["text", "image_url", "file", "text"]


def test_in_resource_scope_an_attachment_travels_inside_its_threads_block(sqlite_engine: Engine) -> None:
    model = model_name("resource")
    config = ObservationalMemoryConfig.parse(
        {
            "scope": "resource",
            "obscureThreadIds": False,
            "observation": {"model": model, "messageTokens": 1000, "bufferTokens": False},
            "reflection": {"model": model, "observationTokens": 50_000},
        }
    )
    om = MemoryEngine(sqlite_engine, models=ModelClient(), config=config)
    resource, with_image, plain = f"user-{uuid.uuid4().hex[:8]}", new_thread(), new_thread()
    om.ingest_turn(with_image, resource, [with_attachments()])
    for i in range(1, MAX_TURNS):
        om.ingest_turn(plain if i % 2 else with_image, resource, [filler(i)])
        if recording_provider.calls(model):
            break
    content = recording_provider.user_content(recording_provider.calls(model)[0])
    assert kinds(content) == ["text", "image_url", "file", "text"]
    before, after = content[0]["text"], content[3]["text"]
    assert "The history below covers" in before, "the resource's multi-thread prompt"
    assert before.rstrip().endswith(FILE_PLACEHOLDER)
    open_block = before[before.rindex("<thread id=") :]
    assert open_block.startswith(f'<thread id="{with_image}">') and "</thread>" not in open_block
    rest_of_block, closed, _ = after.partition("</thread>")
    assert closed and "<thread id=" not in rest_of_block, "the attachments sit inside their thread's block"
    assert check_thread(sqlite_engine, with_image).violations == []


# -------------------------------------------------------------------------------------- ModelByInputTokens


def tier_config(**observation: Any) -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(
        {
            "observation": {
                "model": {"upTo": {"2000": "tier/small", "20000": "tier/large"}},
                "messageTokens": 1000,
                "bufferTokens": False,
                **observation,
            },
            "reflection": {"model": "tier/reflector", "observationTokens": 50_000},
        }
    )


def play_until_observed(om: MemoryEngine, fake: FakeModels, thread_id: str, first: Message) -> TurnResult:
    result = om.ingest_turn(thread_id, "res-1", [first])
    for i in range(1, MAX_TURNS):
        if fake.models:
            return result
        result = om.ingest_turn(thread_id, "res-1", [filler(i)])
    raise AssertionError(f"no Observer call in {MAX_TURNS} turns")


def test_a_small_input_calls_the_first_tier_and_a_larger_one_the_second(sqlite_engine: Engine) -> None:
    fake = FakeModels()
    om = MemoryEngine(sqlite_engine, models=fake, config=tier_config())  # type: ignore[arg-type]
    play_until_observed(om, fake, new_thread(), filler(0))
    assert fake.models == ["tier/small"]

    # The same small conversation after an image whose client-given estimate (§7.3) is 5000 tokens: the
    # attachment counts toward the Observer's input, which now needs the second tier.
    fake.models.clear()
    big_image = Part(
        type="image",
        data=PNG_B64,
        mime_type="image/png",
        provider_metadata={
            "mastra": {"tokenEstimate": {"v": 0, "source": "client", "key": "client", "tokens": 5000}}
        },
    )
    first = Message(id="m0", role="user", parts=[Part(type="text", text="look"), big_image], created_at=T0)
    play_until_observed(om, fake, new_thread(), first)
    assert fake.models == ["tier/large"]


def test_an_input_above_the_largest_tier_fails_with_model_tier_exceeded_and_the_turn_says_so(
    sqlite_engine: Engine,
) -> None:
    fake = FakeModels()
    om = MemoryEngine(sqlite_engine, models=fake, config=tier_config())  # type: ignore[arg-type]
    thread_id = new_thread()
    huge = text_message("m0", "user", "word " * 30_000, T0)
    om.ingest_turn(thread_id, "res-1", [text_message("m-1", "user", "hello", T0 - timedelta(minutes=1))])
    result = om.ingest_turn(thread_id, "res-1", [huge, filler(1)])
    assert fake.models == [], "no model may be called for an input no tier takes"
    failed = [e for e in result.events if e.type == OBSERVATION_FAILED.value]
    assert len(failed) == 1
    payload = failed[0].payload
    assert payload["errorCode"] == "MODEL_TIER_EXCEEDED"
    attempted = _tier_count(payload["error"])
    assert attempted > 20_000
    assert "(20000)" in payload["error"], "the message names the largest threshold"
    assert result.degraded and result.degraded_reason is not None
    assert "MODEL_TIER_EXCEEDED" in result.degraded_reason
    stored = list_events(sqlite_engine, thread_id=thread_id, types=[OBSERVATION_FAILED.value])
    assert [e.payload.get("errorCode") for e in stored] == ["MODEL_TIER_EXCEEDED"]
    assert check_thread(sqlite_engine, thread_id).violations == []


def _tier_count(error: str) -> int:
    """The input-token count the MODEL_TIER_EXCEEDED message names."""
    prefix = "[MODEL_TIER_EXCEEDED] "
    assert error.startswith(prefix), error
    return int(error[len(prefix) :].split(" ", 1)[0])


# ------------------------------------------------------------------------------------------- threadTitle


def title_config(**observation: Any) -> ObservationalMemoryConfig:
    return ObservationalMemoryConfig.parse(
        {
            "observation": {"threadTitle": True, "messageTokens": 1000, **observation},
            "reflection": {"observationTokens": 50_000},
        }
    )


def title_events(db: Engine, thread_id: str) -> list[StoredEvent]:
    return list_events(db, thread_id=thread_id, types=[THREAD_UPDATE.value])


def observe_once(om: MemoryEngine, fake: FakeModels, thread_id: str, start: int) -> int:
    """Play filler from `start` until one more Observer call has been made; the next message number."""
    calls = len(fake.models)
    for i in range(start, start + MAX_TURNS):
        om.ingest_turn(thread_id, "res-1", [filler(i)])
        if len(fake.models) > calls:
            return i + 1
    raise AssertionError(f"no Observer call in {MAX_TURNS} turns")


@pytest.mark.parametrize("buffer_tokens", [False, 0.2], ids=["blocking", "buffered"])
def test_a_new_title_is_stored_and_announced_once_and_short_or_unchanged_ones_are_not(
    engine: Engine, buffer_tokens: Any
) -> None:
    fake = FakeModels(thread_title="Deploy pipeline")
    om = MemoryEngine(engine, models=fake, config=title_config(bufferTokens=buffer_tokens))  # type: ignore[arg-type]
    thread_id = new_thread()
    following = observe_once(om, fake, thread_id, 0)

    thread = history.get_thread(engine, thread_id)
    assert thread is not None and thread.title == "Deploy pipeline"
    assert thread.om_metadata.get("threadTitle") == "Deploy pipeline"
    [update] = title_events(engine, thread_id)
    assert update.payload["newTitle"] == "Deploy pipeline" and "oldTitle" not in update.payload
    observed = {e.cycle_id for e in list_events(engine, thread_id=thread_id) if e.type != THREAD_UPDATE.value}
    assert update.payload["cycleId"] in observed, "the update shares its observation cycle's id"

    # The same title again, then one too short: neither changes the title or announces anything.
    following = observe_once(om, fake, thread_id, following)
    fake.thread_title = " ab "
    following = observe_once(om, fake, thread_id, following)
    assert len(title_events(engine, thread_id)) == 1
    assert history.get_thread(engine, thread_id).title == "Deploy pipeline"  # type: ignore[union-attr]

    # A real change is announced with the old title.
    fake.thread_title = "Release checklist"
    observe_once(om, fake, thread_id, following)
    updates = title_events(engine, thread_id)
    assert [e.payload["newTitle"] for e in updates] == ["Deploy pipeline", "Release checklist"]
    assert updates[-1].payload["oldTitle"] == "Deploy pipeline"
    assert history.get_thread(engine, thread_id).title == "Release checklist"  # type: ignore[union-attr]
    assert check_thread(engine, thread_id).violations == []


def test_with_thread_titles_off_a_proposed_title_changes_nothing(engine: Engine) -> None:
    fake = FakeModels(thread_title="Deploy pipeline")
    om = MemoryEngine(engine, models=fake, config=title_config(threadTitle=False, bufferTokens=False))  # type: ignore[arg-type]
    thread_id = new_thread()
    observe_once(om, fake, thread_id, 0)
    assert title_events(engine, thread_id) == []
    assert history.get_thread(engine, thread_id).title is None  # type: ignore[union-attr]
