"""Service settings from the environment, one prefix for everything: `OM_`.

The API, the workers, beat and the CLI all read these, so a deployment is configured in one place. OM's own
options (thresholds, models, buffering) are the `ObservationalMemoryConfig`; they come from `OM_CONFIG`
(JSON, or a path to a JSON file) with a few common ones also settable directly (`OM_MODEL`,
`OM_MESSAGE_TOKENS`, `OM_OBSERVATION_TOKENS`).
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from om_core.config.options import ObservationalMemoryConfig
from om_core.models.rate_limit import RateLimit

if TYPE_CHECKING:
    from om_core.config.trust import MemoryPolicy
    from om_core.models.call_policy import ModelCallPolicy


def _renamed(name: str, former: str) -> AliasChoices:
    """The variable `name`, also read under its `former` name (the new one wins when both are set)."""
    return AliasChoices(name, former)


class Settings(BaseSettings):
    # populate_by_name: the renamed variables below are read by alias, and code passes them by field name.
    model_config = SettingsConfigDict(
        env_prefix="OM_", env_file=".env", extra="ignore", populate_by_name=True
    )

    database_url: str = Field(
        default="sqlite:///om.db",
        description="SQLAlchemy URL: postgresql+psycopg2://user:pass@host/db, or sqlite:///path for embedded",
    )
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", description="Redis for locks, events, broker")
    broker_url: str | None = Field(default=None, description="Celery broker; defaults to OM_REDIS_URL")
    result_backend: str | None = Field(default=None, description="Celery results; defaults to OM_REDIS_URL")

    config: str | None = Field(default=None, description="OM options as JSON, or a path to a JSON file")
    model: str | None = Field(default=None, description="Observer+Reflector model")
    message_tokens: int | None = Field(default=None, description="observation.messageTokens")
    observation_tokens: int | None = Field(default=None, description="reflection.observationTokens")

    timezone: str = Field(default="UTC", description="IANA zone used to date observations")
    blocking_deadline_s: float = Field(default=30.0, description="Longest wait of a turn on blocking work")
    failure_policy: Literal["bypass", "raise"] = Field(
        default="bypass", description="bypass: a memory-model outage returns the uncompressed context"
    )
    observer_input_cap_tokens: int = Field(default=64_000, description="Largest Observer input per call")
    part_cache_mb: float = Field(
        default=8.0, ge=0, description="Per-process memory for parsed unobserved message parts (0: off)"
    )
    rendered_log_cache_mb: float = Field(
        default=4.0, ge=0, description="Per-process memory for rendered observation logs (0: off)"
    )
    vector_cache_mb: float = Field(
        default=256.0,
        ge=0,
        description="Per-process memory for SQLite search vectors, searched exactly in memory (0: off; "
        "about 1 KB per document with the offline embedder)",
    )

    embedding_model: str = Field(
        default="om-local/wordllama-256",
        description="Search index embedding model, any litellm embedding model string "
        "(openai/text-embedding-3-small, gemini/text-embedding-004); the default is offline and semantic "
        "(WordLlama, falling back to om-local/hashing-embedding when its package is missing)",
    )
    embedding_batch_size: int = Field(default=64, ge=1, le=2048, description="Texts per embedding request")
    index_interval_s: float = Field(
        default=10.0, gt=0, description="A thread's turns ask for search indexing at most this often"
    )

    max_message_bytes: int = Field(default=2_000_000, description="Largest accepted message (413 above)")
    max_parts_per_message: int = Field(default=500, description="Most parts in one message")
    max_import_lines: int = Field(
        default=200_000,
        ge=1,
        description="Most lines one import (`POST /v1/import`, `om import`) may hold (413 above)",
    )
    max_import_line_bytes: int = Field(
        default=4_000_000, ge=1024, description="Largest line of an import (413 above)"
    )
    auth: Literal["keys", "none"] = Field(default="keys", description="keys: API keys; none: embedded only")
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="Logs of the API, workers and beat: text, or json (one object a line with request ids)",
    )
    api_host: str = Field(default="127.0.0.1")
    api_port: int = Field(default=8088)

    # The model-call policy of every process (om_core.models.call_policy). They were worker settings
    # (OM_WORKER_RETRY_*, ...) when only workers honoured them; the old names are still read.
    model_retry_max_retries: int = Field(
        default=8,
        ge=0,
        validation_alias=_renamed("OM_MODEL_RETRY_MAX_RETRIES", "OM_WORKER_RETRY_MAX_RETRIES"),
        description="Retries of a failed model call, in every process (was OM_WORKER_RETRY_MAX_RETRIES)",
    )
    model_retry_base_delay_s: float = Field(
        default=1.0,
        gt=0,
        validation_alias=_renamed("OM_MODEL_RETRY_BASE_DELAY_S", "OM_WORKER_RETRY_BASE_DELAY_S"),
        description="First retry delay, doubling with jitter (was OM_WORKER_RETRY_BASE_DELAY_S)",
    )
    model_retry_max_delay_s: float = Field(
        default=120.0,
        gt=0,
        validation_alias=_renamed("OM_MODEL_RETRY_MAX_DELAY_S", "OM_WORKER_RETRY_MAX_DELAY_S"),
        description="Longest retry delay (was OM_WORKER_RETRY_MAX_DELAY_S)",
    )
    model_rate_limits: dict[str, RateLimit] | None = Field(
        default=None,
        validation_alias=_renamed("OM_MODEL_RATE_LIMITS", "OM_WORKER_RATE_LIMITS"),
        description='Provider budgets as JSON, shared through OM_REDIS_URL when it is set: {"openai/gpt-4o": '
        '{"per_second": 5, "burst": 10}} (was OM_WORKER_RATE_LIMITS)',
    )
    model_rate_limit_max_wait_s: float = Field(
        default=60.0,
        ge=0,
        validation_alias=_renamed("OM_MODEL_RATE_LIMIT_MAX_WAIT_S", "OM_WORKER_RATE_LIMIT_MAX_WAIT_S"),
        description="Longest wait for a model-call token (was OM_WORKER_RATE_LIMIT_MAX_WAIT_S)",
    )

    # The operator's bounds on what a tenant key's thread or resource config may ask of the memory models
    # (om_core.config.trust); the operator's own OM_CONFIG is not bound by them.
    memory_models: str | None = Field(
        default=None,
        description="Comma-separated glob patterns of the Observer/Reflector/extraction models a tenant's "
        "config may choose (unset: any hosted model; a self-hosted provider such as ollama only when a "
        "pattern names it); the models of OM_CONFIG are always allowed",
    )
    memory_min_tokens: int = Field(
        default=1_000,
        ge=1,
        description="Smallest messageTokens, observationTokens, maxTokensPerBatch a tenant config may set",
    )
    memory_min_buffer_tokens: int = Field(
        default=200, ge=1, description="Smallest buffering interval a tenant's config may resolve to"
    )
    memory_max_output_tokens: int = Field(
        default=100_000, ge=1, description="Largest output of one memory-model call, whatever a config says"
    )
    request_models: str | None = Field(
        default=None,
        description="Comma-separated glob patterns of the Observer/Reflector models one turn may choose for "
        "the background work it starts (`memory_options` on /turns); unset: no per-request model. A chosen "
        "model must also pass OM_MEMORY_MODELS",
    )
    request_extractors: bool = Field(
        default=False,
        description="Let one turn choose the extractors of the background work it starts "
        "(`memory_options.observation.extract`), within the code the operator registered",
    )
    memory_tenant_passthrough: bool = Field(
        default=False,
        description="Let tenant configs set the operator-only provider options (the litellm passthrough: "
        "hosts, keys, headers, prices). Only for a server whose every key holder is trusted as its operator",
    )

    plugins: str | None = Field(
        default=None,
        description="Comma-separated Python modules the API and the workers import at start (litellm "
        "providers, hooks, extractors and onExtracted callbacks: the only code a tenant's config can name)",
    )
    tenant_daily_budget_usd: float | None = Field(
        default=None,
        ge=0,
        description="Each tenant's memory-model spend per UTC day, in USD, after which its observation "
        "pauses until the next UTC midnight (unset or 0: no budget; `om tenants limits` sets one tenant's)",
    )
    webhook_allow_private: bool = Field(
        default=False,
        description="Let webhooks call loopback, private and link-local addresses (refused otherwise)",
    )
    webhook_retry_base_s: float = Field(
        default=5.0, gt=0, description="Backoff after a webhook's first failure (doubles, with jitter)"
    )
    webhook_retry_max_s: float = Field(default=3600.0, gt=0, description="Longest webhook backoff")
    webhook_max_failures: int = Field(
        default=20, ge=1, description="Consecutive failures after which a webhook endpoint is dead"
    )
    webhook_settle_s: float = Field(
        default=5.0,
        ge=0,
        description="Age an outbox event must reach before webhooks send it (later commits of lower ids)",
    )

    def memory_policy(self) -> MemoryPolicy:
        """The bounds on tenant-written configs (`om_core.config.trust`)."""
        from om_core.config.trust import MemoryPolicy

        return MemoryPolicy(
            models=tuple(p.strip() for p in (self.memory_models or "").split(",") if p.strip()),
            min_tokens=self.memory_min_tokens,
            min_buffer_tokens=self.memory_min_buffer_tokens,
            max_output_tokens=self.memory_max_output_tokens,
            tenant_passthrough=self.memory_tenant_passthrough,
            request_models=tuple(p.strip() for p in (self.request_models or "").split(",") if p.strip()),
            request_extractors=self.request_extractors,
        )

    def plugin_modules(self) -> list[str]:
        return [name.strip() for name in (self.plugins or "").split(",") if name.strip()]

    @property
    def redis_configured(self) -> bool:
        """Whether OM_REDIS_URL was set (environment, .env or argument) rather than left at its default:
        a process that does not otherwise need Redis uses it for shared rate limits only then."""
        return "redis_url" in self.model_fields_set

    def model_call_policy(self) -> ModelCallPolicy:
        """The retry and rate-limit policy of every model call this process makes."""
        from om_core.models.call_policy import ModelCallPolicy

        return ModelCallPolicy(
            max_retries=self.model_retry_max_retries,
            base_delay_s=self.model_retry_base_delay_s,
            max_delay_s=self.model_retry_max_delay_s,
            rate_limits=dict(self.model_rate_limits or {}),
            rate_limit_max_wait_s=self.model_rate_limit_max_wait_s,
        )

    @property
    def broker(self) -> str:
        return self.broker_url or self.redis_url

    @property
    def results(self) -> str:
        return self.result_backend or self.redis_url

    @cached_property
    def om_config(self) -> ObservationalMemoryConfig:
        """The OM options: `OM_CONFIG` first, then the direct overrides on top."""
        base: dict[str, Any] = {}
        if self.config:
            text = self.config.strip()
            if not text.startswith("{"):
                text = Path(text).read_text()
            base = json.loads(text)
        if self.model:
            base.pop("model", None)
            base["model"] = self.model
        if self.message_tokens is not None:
            base.setdefault("observation", {})["messageTokens"] = self.message_tokens
        if self.observation_tokens is not None:
            base.setdefault("reflection", {})["observationTokens"] = self.observation_tokens
        return ObservationalMemoryConfig.parse(base or True)


def env_help() -> str:
    """The environment variables, for `--help` texts."""
    lines = []
    for name, info in Settings.model_fields.items():
        lines.append(f"OM_{name.upper()}: {info.description or ''} (default: {info.default!r})")
    return "\n".join(lines)
