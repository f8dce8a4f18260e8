"""The API process's own settings, on top of the service-wide `om_core.config.settings.Settings` (same `OM_`
prefix).

Only knobs that exist because there is an HTTP server live here; everything OM-related stays in the shared
settings so the API, workers and CLI agree.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from om_core import Settings

#: The shortest scrape token accepted: guessing it must not be a matter of a few requests.
MIN_METRICS_TOKEN_CHARS = 16


class ApiSettings(Settings):
    executor: Literal["inline", "celery"] = Field(
        default="inline",
        description="inline: background work runs in the API process; celery: it goes to om_workers queues",
    )
    actor_models: str | None = Field(
        default=None,
        description=(
            "Comma-separated glob patterns of the models the proxy may call: the operator's spending guard "
            "(unset: any hosted model; a self-hosted provider such as ollama only when a pattern names it)"
        ),
    )
    auth_cache_s: float = Field(
        default=5.0,
        description="Seconds an API process trusts a verified key (a revoked key works this long); 0: none",
    )
    max_request_bytes: int = Field(default=8_000_000, description="Largest accepted request body (413 above)")
    max_messages_per_turn: int = Field(default=1000, description="Most messages in one turn request")
    sse_poll_s: float = Field(default=1.0, description="Longest wait between outbox reads of a live stream")
    sse_heartbeat_s: float = Field(default=15.0, description="Keep-alive comment interval on idle streams")
    # Outbox ids come from a sequence at insert, so an event can commit after one with a higher id; a
    # stream keeps re-reading the ids it sent for this long to find such an event. It must outlast the
    # longest gap between an event's insert and its commit: 2 s was exceeded on a loaded 2-core machine.
    sse_settle_s: float = Field(default=10.0, description="How long a stream re-reads recent outbox ids")
    # A stream holds a connection and a task for as long as its client keeps it: bounded so one key
    # cannot hold what every tenant shares. Counted per API process (N replicas: N times as many).
    sse_max_streams_per_key: int = Field(
        default=16, ge=1, description="Most event streams one API key may hold open on one API process (429)"
    )
    sse_max_streams: int = Field(
        default=512, ge=1, description="Most event streams one API process holds open, all keys in all (429)"
    )
    proxy_timeout_s: float = Field(default=600.0, description="Longest actor-model call of the proxy")
    proxy_tool_rounds: int = Field(
        default=4,
        ge=0,
        le=50,
        description=(
            "Most rounds of recall calls the proxy answers in one request before it asks the actor for a "
            "final answer without the tool (0: the proxy never offers recall)"
        ),
    )
    flower_url: str | None = Field(
        default=None,
        description=(
            "Where the operator's Flower is reachable, for the dashboard's fleet page to link to "
            "(`GET /v1/whoami`, `GET /v1/fleet`); unset: no link"
        ),
    )
    tenant_rate_limit: float = Field(
        default=200.0,
        ge=0,
        description=(
            "Requests per second one tenant may make to one API process, its keys together (429 over it; "
            "0: no limit; `om tenants limits` sets one tenant's). Each process counts its own requests"
        ),
    )
    tenant_rate_burst: int = Field(
        default=400, ge=1, description="Requests a tenant may make at once before its rate limit applies"
    )
    tenant_limits_refresh_s: float = Field(
        default=30.0,
        gt=0,
        description="How often an API process re-reads the per-tenant limits set with `om tenants limits`",
    )
    usage_max_days: int = Field(
        default=90,
        ge=1,
        le=3660,
        description="Most UTC days one GET /v1/usage/spend serves (a longer window asked for is cut to it)",
    )
    usage_max_rows: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most per-thread day rows one GET /v1/usage/spend answers (the rest: truncated: true)",
    )
    api_threads: int = Field(
        default=40, ge=1, description="Requests served at once (a turn waiting on blocking work holds one)"
    )
    # /metrics names every tenant with its tokens and cost: never on the public port without a credential.
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of the API's own Prometheus /metrics listener, on OM_METRICS_HOST (0: none)",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description=(
            "Address of the /metrics listener: loopback unless a scraper on another host needs it "
            "(0.0.0.0 inside a pod whose port only the cluster reaches)"
        ),
    )
    metrics_token: SecretStr | None = Field(
        default=None,
        description=(
            "Bearer token a scraper sends to read /metrics on the API port (Authorization: Bearer <token>, "
            f"at least {MIN_METRICS_TOKEN_CHARS} characters); unset: /metrics there answers 404"
        ),
    )

    @field_validator("metrics_token", mode="before")
    @classmethod
    def _token_is_long_enough(cls, value: Any) -> Any:
        """An empty token is no token (compose passes an unset variable as ""); a short one is refused at
        start rather than guessed later."""
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        if raw is None or raw == "":
            return None
        if isinstance(raw, str) and len(raw) < MIN_METRICS_TOKEN_CHARS:
            raise ValueError(
                f"OM_METRICS_TOKEN must be at least {MIN_METRICS_TOKEN_CHARS} characters: make one with "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        return value

    @classmethod
    def from_base(cls, settings: Settings) -> ApiSettings:
        """API settings that keep every value of `settings`; the API-only ones come from the environment."""
        if isinstance(settings, ApiSettings):
            return settings
        api = cls(**settings.model_dump())
        # Copied values are not set by the user unless they were in `settings` (`redis_configured` asks).
        api_only = set(cls.model_fields) - set(Settings.model_fields)
        api.__pydantic_fields_set__ = settings.model_fields_set | (api.model_fields_set & api_only)
        return api

    def actor_model_patterns(self) -> list[str]:
        return [p.strip() for p in (self.actor_models or "").split(",") if p.strip()]
