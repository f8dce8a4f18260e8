"""Turning document texts into vectors: through litellm's embedding API, any provider model string.

The model is a server setting (`OM_EMBEDDING_MODEL`), never part of a thread's or a caller's config:
nothing a caller sends can redirect a model call, and every vector of one deployment must come from one
model to be comparable. The default, `om-local/wordllama-256`, is an offline semantic embedder whose weights
come inside the `wordllama` package (`om_local.wordllama`); `om-local/hashing-embedding` is the lexical
fallback (`om_local.embedding`: similarity of words and word fragments, not understanding), used when that
package is missing (`effective_embedding_model`, with a warning) or when the operator chooses it. Both are
registered with litellm like the offline model. Calls go through the process's `ModelClient`, so they are
retried, paced and credential-checked like every Observer call.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from typing import Protocol

from om_core.models.client import ModelClient
from om_core.search.documents import MAX_EMBEDDED_CHARS

log = logging.getLogger(__name__)

#: The offline semantic embedder: static token embeddings shipped in the `wordllama` wheel (MIT).
WORDLLAMA_EMBEDDING_MODEL = "om-local/wordllama-256"
#: The distribution that carries its weights; without it the offline default falls back to hashing.
WORDLLAMA_PACKAGE = "wordllama"
#: The offline lexical embedder (feature hashing): the fallback, or an operator's choice.
HASHING_EMBEDDING_MODEL = "om-local/hashing-embedding"
#: The embedder when none is configured: offline, deterministic, no key.
DEFAULT_EMBEDDING_MODEL = WORDLLAMA_EMBEDDING_MODEL

_warned: set[str] = set()


def effective_embedding_model(configured: str) -> str:
    """The model this process embeds with for the configured one: itself, except the offline semantic
    model when its package is not installed, which falls back to the hashing embedder with a warning
    (once per process). Documents record the model that embedded them, so vectors of the two are never
    compared: a later install re-embeds each thread's documents as it is indexed."""
    if configured != WORDLLAMA_EMBEDDING_MODEL or importlib.util.find_spec(WORDLLAMA_PACKAGE) is not None:
        return configured
    if configured not in _warned:
        _warned.add(configured)
        log.warning(
            "%s needs the %s package, which is not installed: embedding with %s (lexical similarity "
            "only); pip install %s, or set OM_EMBEDDING_MODEL to choose a model",
            configured,
            WORDLLAMA_PACKAGE,
            HASHING_EMBEDDING_MODEL,
            WORDLLAMA_PACKAGE,
        )
    return HASHING_EMBEDDING_MODEL


class Embedder(Protocol):
    """Vectors for texts, one per text, all of one model (`model`) and one length."""

    @property
    def model(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class ModelEmbedder:
    """An `Embedder` calling `model` through a `ModelClient` in batches of `batch_size` texts."""

    def __init__(
        self, model: str, client: ModelClient, *, batch_size: int = 64, timeout_s: float = 60.0
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._model = model
        self.client = client
        self.batch_size = batch_size
        self.timeout_s = timeout_s

    @property
    def model(self) -> str:
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [(t[:MAX_EMBEDDED_CHARS] or " ") for t in texts[start : start + self.batch_size]]
            vectors.extend(self.client.embed(self._model, batch, timeout_s=self.timeout_s))
        return vectors
