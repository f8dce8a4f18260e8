"""What the engine needs from outside, as protocols, and the service knobs it runs with.

The shells provide these: the workers a Redis publisher and a Celery executor (`om_adapters`), the API
the same plus the model-call policy. Keeping them protocols keeps the engine free of any shell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from om_core.config.trust import MemoryPolicy
from om_core.errors import OMError
from om_core.models.selection import CallModel
from om_core.store.types import StoredEvent
from om_core.tenancy.scoped_ids import StoredId
from om_core.webhooks.policy import WebhookPolicy

FailurePolicy = Literal["bypass", "raise"]


class Completion(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cost(self) -> float | None: ...
    @property
    def model(self) -> str: ...
    @property
    def finish_reason(self) -> str | None: ...


#: A user message: plain text, or OpenAI-style content parts (text, `image_url`, `file`) when
#: attachments travel with it.
UserContent = str | Sequence[Mapping[str, Any]]


class ModelCaller(Protocol):
    def complete(
        self,
        model: CallModel,
        *,
        system: str,
        user: UserContent,
        temperature: float | None,
        max_output_tokens: int | None,
        provider_options: dict[str, Any] | None,
        response_format: dict[str, Any] | None = None,
    ) -> Completion:
        """`response_format` (structured extraction only) asks for structured output (litellm's
        `response_format`); the other calls never pass it."""
        ...

    def accepts_images(self, model: str) -> bool | None:
        """Whether `model` (a router id) takes image input: what `observeAttachments: "auto"` decides
        from. None when nothing is known about the model (the spec then forwards everything, §5.5)."""
        ...


class EventPublisher(Protocol):
    def publish(self, events: Sequence[StoredEvent]) -> None: ...


class NullPublisher:
    def publish(self, events: Sequence[StoredEvent]) -> None:
        return None


@dataclass(frozen=True)
class EngineSettings:
    """Service-level knobs that are not OM options."""

    timezone: str = "UTC"
    #: Largest Observer input per call; a larger backlog is split (never sent whole and failed forever).
    observer_input_cap_tokens: int = 64_000
    #: How long a turn waits for a blocking observation or reflection before going on uncompressed.
    blocking_deadline_s: float = 30.0
    failure_policy: FailurePolicy = "bypass"
    #: Lock lifetimes; locks only de-duplicate work, so an expiry costs duplicate work, never data.
    lock_ttl_s: float = 300.0
    #: Memory for parsed unobserved parts kept between turns (0 turns the cache off; see
    #: `store.part_cache`). A full 30k-token window takes ~0.3 MB.
    part_cache_bytes: int = 8 * 1024 * 1024
    #: Memory for rendered observation logs (see `context.RenderedLogCache`); a 15k-token log takes ~0.2 MB.
    rendered_log_cache_bytes: int = 4 * 1024 * 1024
    #: The search index's embedding model (`OM_EMBEDDING_MODEL`): a server setting, never a caller's.
    embedding_model: str = "om-local/wordllama-256"
    #: Texts per embedding request.
    embedding_batch_size: int = 64
    #: A turn of a thread with retrieval on asks for indexing at most once per this many seconds.
    index_interval_s: float = 10.0
    #: Webhook delivery: backoff, bound, timeouts, private targets (`OM_WEBHOOK_*`).
    webhooks: WebhookPolicy = field(default_factory=WebhookPolicy)
    #: The operator's bounds on tenant-written configs (`OM_MEMORY_*`, `om_core.config.trust`).
    memory_policy: MemoryPolicy = field(default_factory=MemoryPolicy)
    #: Each tenant's memory-model spend per UTC day unless the operator set its own (`om tenants limits`);
    #: None: no budget (`OM_TENANT_DAILY_BUDGET_USD`, `om_core.tenancy.spend`).
    tenant_daily_budget_usd: float | None = None


class ObserverDegenerateError(OMError, RuntimeError):
    """No usable Observer reply. `partial_observations` are the observations the last reply held when it
    could not be used as a whole (cut at the output-token limit, say): what was observed before the
    failure, which the failed event shows (`observations`) and nothing commits."""

    def __init__(self, detail: str, partial_observations: str = "") -> None:
        super().__init__("OBSERVER_DEGENERATE", f"[OBSERVER_DEGENERATE] {detail}")
        self.partial_observations = partial_observations

    def __reduce__(self) -> tuple[Any, ...]:
        return (_degenerate, (str(self), self.partial_observations))


def _degenerate(message: str, partial: str) -> ObserverDegenerateError:
    error = ObserverDegenerateError("", partial)
    error.args = (message,)
    return error


class ThreadIdRequired(OMError, ValueError):
    def __init__(self) -> None:
        super().__init__("THREAD_ID_REQUIRED", "[THREAD_ID_REQUIRED] a thread id is required in thread scope")


class MemoryDisabled(OMError, ValueError):
    """Manual observe/reflect on a thread whose effective config says `enabled: false`: OM is off there
    (behaviour §2.1), so there is no memory to work on; refused rather than silently doing nothing."""

    def __init__(self, thread_id: StoredId) -> None:
        self.thread_id = thread_id
        super().__init__(
            "MEMORY_DISABLED",
            f"[MEMORY_DISABLED] observational memory is off for thread {thread_id!r} (enabled: false); "
            "set enabled: true in its config to observe or reflect",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (MemoryDisabled, (self.thread_id,))
