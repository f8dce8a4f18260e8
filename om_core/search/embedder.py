"""Turning document texts into vectors: through litellm's embedding API, any provider model string.

The model is a server setting (`OM_EMBEDDING_MODEL`), never part of a thread's or a caller's config:
nothing a caller sends can redirect a model call, and every vector of one deployment must come from one
model to be comparable. The default, `om-local/hashing-embedding`, is the offline deterministic embedder
registered with litellm like the offline model (`om_local.embedding`: lexical similarity of
words and word fragments, not understanding). Calls go through the process's `ModelClient`, so they are
retried, paced and credential-checked like every Observer call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from om_core.models.client import ModelClient
from om_core.search.documents import MAX_EMBEDDED_CHARS

#: The embedder when none is configured: offline, deterministic, no key.
DEFAULT_EMBEDDING_MODEL = "om-local/hashing-embedding"


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
