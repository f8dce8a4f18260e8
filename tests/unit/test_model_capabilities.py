"""Which models take images, by litellm's model data: what `observeAttachments: "auto"` decides from."""

from __future__ import annotations

import pytest

# Imported before litellm: the package pins litellm to its bundled price table (no download at import).
import om_core.models  # noqa: F401
from om_core.models.capabilities import accepts_images
from om_core.models.client import ModelClient
from om_local.extractive import register_local_models


@pytest.mark.parametrize(
    ("router_id", "expected"),
    [
        ("google/gemini-2.5-flash", True),  # the router id is mapped to litellm's `gemini/...` first
        ("openai/gpt-4o", True),
        ("anthropic/claude-haiku-4-5", True),
        ("gpt-4o", True),
        ("openai/gpt-3.5-turbo", False),  # listed, without vision
        ("deepseek/deepseek-chat", False),
        ("nosuchprovider/mystery-model", None),  # not listed: unknown, not "no"
    ],
)
def test_litellm_model_data_decides(router_id: str, expected: bool | None) -> None:
    assert accepts_images(router_id) is expected
    assert ModelClient(environ={}).accepts_images(router_id) is expected


def test_the_offline_model_is_listed_as_text_only() -> None:
    register_local_models()
    assert accepts_images("om-local/extractive") is False
