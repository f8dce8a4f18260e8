"""The response bodies of the routes beyond the turn path: webhooks, working memory, the dashboard's reads
(who am I, resources, fleet, a generation's diff), recall and the proxy's chat completion. Like
`om_client.models` they are defined once, here, and the server's `om_api.schemas` imports them, so the
client parses exactly what the OpenAPI document describes. Kept apart from `om_client.models` so that module
stays the turn path's; this one imports only pydantic and `om_client.models`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from om_client.models import KeyUsageResponse, MemoryBudget, OMUsage, Page, _CamelResponse, _Response

__all__ = [
    "ChatCompletionResponse",
    "DaySpend",
    "DiffLineOut",
    "FleetResponse",
    "GenerationDiffResponse",
    "QueueDepth",
    "RecallResponse",
    "RecentFailure",
    "ResourceSummary",
    "SpendResponse",
    "ThreadDaySpend",
    "WebhookAttempt",
    "WebhookCreated",
    "WebhookDeliveries",
    "WebhookInfo",
    "WhoAmI",
    "WorkerSeen",
    "WorkingMemoryResponse",
]


class RecallResponse(_CamelResponse):
    """One recall answer (behaviour §9.4); which fields are present depends on the mode. Messages mode:
    `messages`, `count`, `cursor`, `page`, `limit`, `detail`, `hasNextPage`, `hasPrevPage` (plus
    `truncated` and `tokenOffset` when the token budget cut it). With `partIndex`: `text`, `messageId`,
    `partIndex`, `role`, `type`, `truncated` (plus `nextCharOffset`, and `note` when the part was not
    there and the next message's first part is shown). Threads: `threads`, `count`, `page`, `hasMore`.
    Search: `results`, `count`."""

    messages: str | None = None
    threads: str | None = None
    results: str | None = None
    text: str | None = None
    count: int | None = None
    cursor: str | None = None
    page: int | None = None
    limit: int | None = None
    detail: Literal["low", "high"] | None = None
    has_next_page: bool | None = None
    has_prev_page: bool | None = None
    has_more: bool | None = None
    truncated: bool | None = None
    token_offset: int | None = None
    message_id: str | None = None
    part_index: int | None = None
    role: str | None = None
    type: str | None = None
    next_char_offset: int | None = None
    note: str | None = None


class WhoAmI(_Response):
    """Who the caller is to this server: what the dashboard asks before it shows a sign-in form."""

    auth: Literal["key", "none"] = Field(
        description="`key`: requests carry an API key; `none`: authentication is off (om up), no sign-in"
    )
    tenant_id: str | None = Field(description="The key's tenant; null when authentication is off")
    flower_url: str | None = Field(description="Where the operator's Flower is (OM_FLOWER_URL); null: none")


class ResourceSummary(_Response):
    """A resource with the totals of its threads."""

    id: str = Field(description="The resource's id")
    threads: int
    messages: int = Field(description="Messages stored in all its threads")
    last_activity_at: datetime | None = Field(description="The newest turn of any of its threads")
    cost_usd: float = Field(description="litellm's cost of OM's own model calls for its threads")


class QueueDepth(_Response):
    name: str = Field(description="A Celery queue of the task table (ARCHITECTURE.md, the operations table)")
    depth: int = Field(description="Messages waiting in the broker (not those a worker already took)")


class WorkerSeen(_Response):
    name: str = Field(description="The worker's Celery hostname")
    queues: list[str] = Field(description="The queues it consumes")


class RecentFailure(_Response):
    thread_id: str | None = Field(description="The thread; null for a resource's shared log")
    type: str = Field(description="The failure event's type (`data-om-buffering-failed`, ...)")
    error: str
    at: datetime


class FleetResponse(_Response):
    """The background machinery as the caller may see it. Queue depths and workers are the operator's
    facts, the same for every tenant; failures and usage are the caller's own."""

    executor: Literal["celery", "inline"] = Field(
        description="celery: workers run background work; inline: the API process does"
    )
    queues: list[QueueDepth] = Field(description="Every queue's depth (empty inline: there is no broker)")
    workers: list[WorkerSeen] = Field(
        description="Workers that answered within about a second (empty inline)"
    )
    recent_failures: list[RecentFailure] = Field(
        description="The caller's last 20 failed cycles, newest first"
    )
    usage: KeyUsageResponse | None = Field(
        description="The calling key's actor-model usage (as GET /v1/usage); null without keys"
    )
    om_usage: OMUsage = Field(
        description="OM's own model usage and cost (Observer, Reflector) of the caller's tenant"
    )
    flower_url: str | None = Field(description="Where the operator's Flower is (OM_FLOWER_URL); null: none")


class DiffLineOut(_Response):
    op: Literal["kept", "added", "removed"]
    text: str


class GenerationDiffResponse(_Response):
    """What the reflection (or line edit) that made a generation changed: its log against the previous
    generation's, line by line. Lines appended to the generation after its reflection show as added too."""

    generation: int
    previous_generation: int | None = Field(description="The generation compared against; null: the first")
    lines: list[DiffLineOut]


class ChatCompletionResponse(BaseModel):
    """A standard chat-completions response (OpenAI shape)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: dict[str, Any] | None = None


class WorkingMemoryResponse(_Response):
    scope: Literal["thread", "resource"]
    format: Literal["markdown", "json"]
    content: str | dict[str, Any] = Field(
        description="The memory: Markdown text, or the JSON object in schema mode; the template (or {}) "
        "before the first write"
    )
    version: int = Field(description="Counts writes; 0 before the first")
    updated_at: datetime | None
    updated_by: Literal["api", "observer", "actor"] | None
    thread_id: str | None = Field(description="The thread whose memory this is (thread scope), else null")
    resource_id: str


class WebhookInfo(_Response):
    """An endpoint and its delivery state: `state` is `active`, `failing` (retrying with backoff: see
    `failures`, `next_attempt_at`, `last_error`) or `dead` (stopped after too many failures; PATCH
    `enabled: true` to retry)."""

    id: str
    url: str
    events: list[str]
    description: str | None
    enabled: bool
    state: Literal["active", "failing", "dead"]
    failures: int = Field(description="Consecutive failed attempts of the event waiting to be delivered")
    next_attempt_at: datetime | None
    last_error: str | None
    last_delivered_at: datetime | None
    delivered_total: int
    failed_total: int = Field(description="Failed attempts since the endpoint was registered")
    created_at: datetime
    updated_at: datetime
    legacy_signature: bool = Field(
        default=False,
        description="The deprecated OM-Signature header is sent too (endpoints registered before "
        "Standard Webhooks signing)",
    )
    previous_secret_expires_at: datetime | None = Field(
        default=None,
        description="While a rotated-out secret still signs deliveries: until when; null: one secret",
    )


class WebhookCreated(WebhookInfo):
    secret: str = Field(
        description="The signing secret (whsec_<base64>: the Standard Webhooks key of the webhook-signature "
        "header); shown only here"
    )


class WebhookAttempt(_Response):
    """One attempt to deliver one event."""

    id: int
    event_id: int
    event_type: str
    thread_id: str | None
    attempt: int = Field(description="1 for the first attempt of this event, 2 for its first retry, ...")
    outcome: Literal["delivered", "failed"]
    status_code: int | None
    error: str | None
    duration_ms: int
    created_at: datetime


class WebhookDeliveries(Page[WebhookAttempt]):
    """The endpoint's state and its last attempts, newest first (the last 200 are kept). `pending` counts
    the events past the cursor (up to 10 000), whether subscribed or not."""

    endpoint_id: str
    state: Literal["active", "failing", "dead"]
    pending: int
    failures: int
    next_attempt_at: datetime | None
    last_error: str | None


class DaySpend(_Response):
    """OM's model usage on one UTC day."""

    day: str = Field(description="The UTC day, YYYY-MM-DD")
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost_usd: float = Field(description="litellm's cost of those calls; 0 for models it has no price for")
    cycles: int


class ThreadDaySpend(DaySpend):
    thread_id: str


class SpendResponse(_Response):
    """The caller's tenant's memory-model spend per day, per thread per day, and its budget today."""

    first_day: str = Field(description="The oldest UTC day counted, YYYY-MM-DD")
    last_day: str = Field(description="Today (UTC), YYYY-MM-DD")
    thread_id: str | None = Field(description="The thread asked for; null: the whole tenant")
    days: list[DaySpend] = Field(
        description="Usage per day with any (the thread's, or the tenant's), oldest first"
    )
    threads: list[ThreadDaySpend] = Field(
        description="Per thread per day, newest day first, costliest thread first (empty for one thread)"
    )
    truncated: bool = Field(description="More per-thread rows exist than OM_USAGE_MAX_ROWS allows")
    budget: MemoryBudget
