"""The workers' Redis and Celery adapters, handed to the API by the layer above both shells.

The API and the workers are independent of each other (the layers contract, ARCHITECTURE.md, "Layers"),
yet a celery-mode API runs on the workers' adapters of the core's ports: `CeleryExecutor` sends background
work to their queues, `RedisCoordination` shares locks and counters with them, `RedisPublisher` reaches
every replica's live streams, and `TokenBucket` keeps the one model-call budget they all spend (an inline
API next to a Redis spends it too). `om_app` may import both shells, so it builds them here, and every
`om_app` entry point that starts the API in-process passes them in (`om serve`, this module's uvicorn
factory).

Imports are deferred to the call: an inline API loads no Celery, and `om serve` loads the token encoding
before the engine's imports (`TiktokenEstimator.load`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from om_api.runtime import Adapters, Distributed
    from om_api.settings import ApiSettings
    from om_core import RateLimiter

__all__ = ["create_app_from_env", "worker_adapters"]


def worker_adapters() -> Adapters:
    """The adapters for `om_api.runtime.build_runtime` and `om_api.app.create_app`."""
    from om_api.runtime import Adapters

    return Adapters(distributed=_distributed, rate_limit_bucket=_rate_limit_bucket)


def _distributed(settings: ApiSettings) -> Distributed:
    """The celery-mode parts: one Redis client (the broker's) for coordination, events and the bucket."""
    from redis import Redis

    from om_api.runtime import Distributed
    from om_workers.app import app as celery_app
    from om_workers.coordination import RedisCoordination
    from om_workers.events import RedisPublisher
    from om_workers.executor import CeleryExecutor

    redis = Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
    return Distributed(
        executor=CeleryExecutor(celery_app),
        coordination=RedisCoordination(redis),
        publisher=RedisPublisher(redis),
        broker=redis,
        celery_app=celery_app,
    )


def _rate_limit_bucket(client: Any) -> RateLimiter:
    from om_workers.ratelimit import TokenBucket

    return TokenBucket(client)


def create_app_from_env() -> FastAPI:
    """The uvicorn factory (`uvicorn --factory om_app.wiring:create_app_from_env`): the API with the
    workers' adapters and its settings from the environment, as `om serve` builds it (which is leaner
    still: it also caps the malloc arenas and freezes the start-up heap)."""
    from om_core.tokens import default_estimator

    default_estimator().load()  # first, before the API's imports, as `om serve` does
    from om_api.app import create_app
    from om_api.settings import ApiSettings

    return create_app(ApiSettings(), worker_adapters())
