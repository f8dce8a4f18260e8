"""`om-local/extractive`: an offline, deterministic model that litellm can call like any other.

It lets the whole service (engine, workers, API, tests) run the real call path — `litellm.completion`,
usage and cost accounting, retries — with no network and no API key. It is registered with litellm as a
custom provider, so nothing upstream needs to know it is not a hosted model.

It reads the prompt it is given and answers in the documented output format:

- an Observer prompt (the user message has a "New Message History to Observe" section) gets dated,
  prioritised observations extracted from the transcript (`om_local.observer`);
- a Reflector prompt ("Observations to Reflect On") gets the log rewritten smaller, under the stated
  target when possible (`om_local.reflector`);
- a structured extraction request ("Structured Extraction Request") gets a JSON object filled by the
  heuristics of `om_local.extraction`;
- anything else gets its fact-bearing sentences as one observation block.

Usage is reported in the engine's token units; the cost is registered as zero.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import litellm
from litellm.llms.custom_llm import CustomLLM
from litellm.types.llms.openai import ChatCompletionUsageBlock
from litellm.types.utils import (
    Choices,
    EmbeddingResponse,
    GenericStreamingChunk,
    Message,
    ModelResponse,
    Usage,
)

from om_core.models.routing import LOCAL_PROVIDER
from om_local.embedding import MODEL_ID as EMBEDDING_MODEL_ID
from om_local.embedding import hashing_embedding
from om_local.extraction import is_structured_prompt, structured_reply
from om_local.observer import is_observer_prompt, observe_prompt, summarize_text
from om_local.reflector import count_tokens, is_reflector_prompt, reflect_prompt
from om_local.wordllama import MODEL_ID as WORDLLAMA_MODEL_ID
from om_local.wordllama import wordllama_embeddings

__all__ = [
    "LOCAL_MODELS",
    "LocalExtractiveLLM",
    "local_reply",
    "register_local_models",
]

#: Model IDs served by the local provider (router ID = litellm name: `om-local/<id>`).
LOCAL_MODELS = ("extractive",)
#: Embedding models served by the local provider: `om-local/wordllama-256` (`om_local.wordllama`) and
#: `om-local/hashing-embedding` (`om_local.embedding`).
LOCAL_EMBEDDING_MODELS = (WORDLLAMA_MODEL_ID, EMBEDDING_MODEL_ID)

_registration_lock = threading.Lock()


def _text_of(content: object) -> str:
    """Text of a chat message's content: a string, or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "\n".join(texts)
    return ""


def local_reply(system: str, user: str) -> str:
    """What the local model answers to a system prompt and user message (pure and deterministic)."""
    if is_structured_prompt(user):
        return structured_reply(user)
    if is_reflector_prompt(user):
        return reflect_prompt(system, user)
    if is_observer_prompt(user):
        return observe_prompt(system, user)
    return summarize_text(user)


class LocalExtractiveLLM(CustomLLM):
    """The litellm handler for the `om-local` provider (plain and streamed calls, sync and async; and
    `litellm.embedding` with the offline embedders)."""

    def embedding(self, model: str, input: list[Any], *args: Any, **kwargs: Any) -> EmbeddingResponse:
        if model not in LOCAL_EMBEDDING_MODELS:
            raise ValueError(
                f"{LOCAL_PROVIDER}/{model} is not an embedding model; use one of "
                + ", ".join(f"{LOCAL_PROVIDER}/{m}" for m in LOCAL_EMBEDDING_MODELS)
            )
        response = kwargs.get("model_response")
        if not isinstance(response, EmbeddingResponse):
            response = EmbeddingResponse()
        texts = [str(item) for item in input]
        response.model = f"{LOCAL_PROVIDER}/{model}"
        response.object = "list"
        if model == WORDLLAMA_MODEL_ID:
            vectors = wordllama_embeddings(texts)
        else:
            vectors = [hashing_embedding(text) for text in texts]
        response.data = [
            {"object": "embedding", "index": i, "embedding": vector} for i, vector in enumerate(vectors)
        ]
        tokens = sum(len(text.split()) for text in texts)
        response.usage = Usage(prompt_tokens=tokens, completion_tokens=0, total_tokens=tokens)
        return response

    async def aembedding(self, model: str, input: list[Any], *args: Any, **kwargs: Any) -> EmbeddingResponse:
        return self.embedding(model, input, *args, **kwargs)

    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        reply, prompt_tokens, completion_tokens = _answer(messages)
        response = kwargs.get("model_response")
        if not isinstance(response, ModelResponse):
            response = ModelResponse()
        response.id = f"om-local-{uuid.uuid4().hex}"
        response.created = int(time.time())
        response.model = f"{LOCAL_PROVIDER}/{model}"
        response.choices = [
            Choices(finish_reason="stop", index=0, message=Message(content=reply, role="assistant"))
        ]
        response.usage = Usage(  # type: ignore[attr-defined]  # set like litellm's own handlers do
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )
        return response

    async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        return self.completion(model, messages, *args, **kwargs)

    def streaming(
        self, model: str, messages: list[Any], *args: Any, **kwargs: Any
    ) -> Iterator[GenericStreamingChunk]:
        yield _single_chunk(messages)

    # litellm declares this as a coroutine returning an iterator but iterates what it returns; an async
    # generator is what its own examples use.
    async def astreaming(  # type: ignore[override]
        self, model: str, messages: list[Any], *args: Any, **kwargs: Any
    ) -> AsyncIterator[GenericStreamingChunk]:
        yield _single_chunk(messages)


def _answer(messages: list[Any]) -> tuple[str, int, int]:
    """(reply, prompt tokens, completion tokens) for a chat message list."""
    system = "\n\n".join(_text_of(m.get("content")) for m in messages if m.get("role") == "system")
    user = "\n\n".join(_text_of(m.get("content")) for m in messages if m.get("role") == "user")
    reply = local_reply(system, user)
    return reply, count_tokens(system) + count_tokens(user), count_tokens(reply)


def _single_chunk(messages: list[Any]) -> GenericStreamingChunk:
    """The whole reply as one stream chunk: a deterministic model has nothing to gain from trickling."""
    reply, prompt_tokens, completion_tokens = _answer(messages)
    usage = ChatCompletionUsageBlock(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
    )
    return GenericStreamingChunk(text=reply, is_finished=True, finish_reason="stop", usage=usage, index=0)


def _is_registered(provider_map: Sequence[Mapping[str, Any]]) -> bool:
    return any(entry.get("provider") == LOCAL_PROVIDER for entry in provider_map)


def register_local_models() -> None:
    """Make `litellm.completion(model="om-local/extractive", ...)` work offline. Safe to call often."""
    with _registration_lock:
        if _is_registered(litellm.custom_provider_map):
            return
        litellm.custom_provider_map = [
            *litellm.custom_provider_map,
            {"provider": LOCAL_PROVIDER, "custom_handler": LocalExtractiveLLM()},
        ]
        prices = {
            f"{LOCAL_PROVIDER}/{model_id}": {
                "input_cost_per_token": 0.0,
                "output_cost_per_token": 0.0,
                "cache_creation_input_token_cost": 0.0,
                "cache_read_input_token_cost": 0.0,
                "litellm_provider": LOCAL_PROVIDER,
                "mode": "chat",
                "max_input_tokens": 1_000_000,
                "max_output_tokens": 1_000_000,
                "max_tokens": 1_000_000,
            }
            for model_id in LOCAL_MODELS
        }
        prices.update(
            {
                f"{LOCAL_PROVIDER}/{model_id}": {
                    "input_cost_per_token": 0.0,
                    "output_cost_per_token": 0.0,
                    "litellm_provider": LOCAL_PROVIDER,
                    "mode": "embedding",
                    "max_input_tokens": 1_000_000,
                    "max_tokens": 1_000_000,
                }
                for model_id in LOCAL_EMBEDDING_MODELS
            }
        )
        litellm.register_model(prices)
