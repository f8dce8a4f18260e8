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
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from om_core.config import ObservationalMemoryConfig


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OM_", env_file=".env", extra="ignore")

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

    max_message_bytes: int = Field(default=2_000_000, description="Largest accepted message (413 above)")
    max_parts_per_message: int = Field(default=500, description="Most parts in one message")
    auth: Literal["keys", "none"] = Field(default="keys", description="keys: API keys; none: embedded only")
    api_host: str = Field(default="127.0.0.1")
    api_port: int = Field(default=8088)

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
