"""The offline embedders: WordLlama read from its wheel with no network, and the hashing fallback when the
package is missing (with a warning), chosen once for the process from `OM_EMBEDDING_MODEL`."""

from __future__ import annotations

import logging
import math
import socket
import sys
from typing import Any

import pytest

from om_core.config.settings import Settings
from om_core.models.client import ModelClient
from om_core.runtime import engine_settings
from om_core.search import embedder as embedder_module
from om_core.search.embedder import (
    DEFAULT_EMBEDDING_MODEL,
    HASHING_EMBEDDING_MODEL,
    WORDLLAMA_EMBEDDING_MODEL,
    effective_embedding_model,
)
from om_local import wordllama


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_wordllama_loads_from_the_installed_wheel_with_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the offline embedder opened a connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(wordllama, "_loaded", None)  # load again, here, under the refusal
    monkeypatch.delitem(sys.modules, "wordllama", raising=False)
    handlers = list(logging.getLogger().handlers)
    dog, beagle, invoice, empty = wordllama.wordllama_embeddings(
        ["what is the name of my dog", "I adopted a beagle named Rufus", "the invoice is due on Tuesday", ""]
    )
    assert len(dog) == wordllama.DIMENSIONS == 256
    assert math.isclose(math.fsum(v * v for v in dog), 1.0, rel_tol=1e-5)
    assert empty == [0.0] * 256
    assert _cosine(dog, beagle) > _cosine(dog, invoice) + 0.1
    assert wordllama.wordllama_embeddings(["I adopted a beagle named Rufus"])[0] == beagle
    # Read from the package's files, never through its loader: no import, no root logging set up.
    assert "wordllama" not in sys.modules
    assert logging.getLogger().handlers == handlers


def test_the_default_is_served_by_the_local_provider() -> None:
    assert Settings().embedding_model == DEFAULT_EMBEDDING_MODEL == WORDLLAMA_EMBEDDING_MODEL
    vectors = ModelClient(environ={}).embed(DEFAULT_EMBEDDING_MODEL, ["a beagle", "my dog", "a tax form"])
    assert [len(v) for v in vectors] == [256, 256, 256]
    assert _cosine(vectors[0], vectors[1]) > _cosine(vectors[2], vectors[1])


def test_a_missing_package_falls_back_to_hashing_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "wordllama", None)  # what a failing import looks like to find_spec
    monkeypatch.setattr(embedder_module, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="om_core.search.embedder"):
        assert effective_embedding_model(WORDLLAMA_EMBEDDING_MODEL) == HASHING_EMBEDDING_MODEL
        assert engine_settings(Settings()).embedding_model == HASHING_EMBEDDING_MODEL
    warnings = [r for r in caplog.records if "wordllama" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING  # once per process
    assert HASHING_EMBEDDING_MODEL in warnings[0].getMessage()
    # Another configured model is the operator's choice, whatever is installed.
    assert effective_embedding_model("openai/text-embedding-3-small") == "openai/text-embedding-3-small"
    assert effective_embedding_model(HASHING_EMBEDDING_MODEL) == HASHING_EMBEDDING_MODEL
    # The local provider asked for the model anyway says what is missing.
    monkeypatch.setattr(wordllama, "_loaded", None)
    with pytest.raises(wordllama.WordLlamaUnavailable, match="pip install wordllama"):
        wordllama.wordllama_embeddings(["x"])


def test_with_the_package_the_configured_model_is_used(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="om_core.search.embedder"):
        assert effective_embedding_model(WORDLLAMA_EMBEDDING_MODEL) == WORDLLAMA_EMBEDDING_MODEL
        assert engine_settings(Settings()).embedding_model == WORDLLAMA_EMBEDDING_MODEL
    assert not caplog.records
