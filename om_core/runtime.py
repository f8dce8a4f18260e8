"""Building a ready engine from settings: the one place processes (API, worker, beat, CLI) wire things up."""

from __future__ import annotations

from om_core.config.settings import Settings
from om_core.coordination import Coordination
from om_core.engine import EngineSettings, EventPublisher, Executor, MemoryEngine
from om_core.models.call_policy import build_model_client
from om_core.models.client import ModelClient
from om_core.models.rate_limit import RateLimiter
from om_core.search.embedder import ModelEmbedder, effective_embedding_model
from om_core.search.query import Searcher
from om_core.search.vector_cache import VectorCache
from om_core.store.db import make_engine
from om_core.webhooks.policy import WebhookPolicy


def engine_settings(settings: Settings) -> EngineSettings:
    return EngineSettings(
        timezone=settings.timezone,
        observer_input_cap_tokens=settings.observer_input_cap_tokens,
        blocking_deadline_s=settings.blocking_deadline_s,
        failure_policy=settings.failure_policy,
        part_cache_bytes=int(settings.part_cache_mb * 1024 * 1024),
        rendered_log_cache_bytes=int(settings.rendered_log_cache_mb * 1024 * 1024),
        embedding_model=effective_embedding_model(settings.embedding_model),
        embedding_batch_size=settings.embedding_batch_size,
        index_interval_s=settings.index_interval_s,
        memory_policy=settings.memory_policy(),
        tenant_daily_budget_usd=settings.tenant_daily_budget_usd,
        webhooks=WebhookPolicy(
            allow_private=settings.webhook_allow_private,
            retry_base_s=settings.webhook_retry_base_s,
            retry_max_s=settings.webhook_retry_max_s,
            max_failures=settings.webhook_max_failures,
            settle_s=settings.webhook_settle_s,
        ),
    )


def build_engine(
    settings: Settings,
    *,
    executor: Executor | None = None,
    coordination: Coordination | None = None,
    publisher: EventPublisher | None = None,
    models: ModelClient | None = None,
    rate_limiter: RateLimiter | None = None,
) -> MemoryEngine:
    """An engine on the configured database. Without an executor, background work runs inline.

    Its model calls follow the one model-call policy of the settings (`build_model_client`) whatever the
    executor; `rate_limiter` is where the budgets live: the shell passes the shared Redis bucket when it
    has one, otherwise this process keeps its own. The engine's `searcher` (the recall tool's search mode)
    searches with the configured embedding model."""
    db = make_engine(settings.database_url)
    client = models or build_model_client(settings.model_call_policy(), rate_limiter)
    # One embedder for indexing and for search (the recall tool's search mode and the search routes): the
    # server's model through this process's model client, its retries and budgets.
    embedder = ModelEmbedder(
        effective_embedding_model(settings.embedding_model), client, batch_size=settings.embedding_batch_size
    )
    return MemoryEngine(
        db,
        models=client,
        config=settings.om_config,
        coordination=coordination,
        executor=executor,
        publisher=publisher,
        settings=engine_settings(settings),
        embedder=embedder,
        searcher=Searcher(db, embedder, VectorCache(int(settings.vector_cache_mb * 1024 * 1024))),
    )
