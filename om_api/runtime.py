"""What one API process holds: the engine wired for the chosen executor, the event fan-out, metrics.

`OM_EXECUTOR=inline` (the default, and the embedded mode) runs background work in this process;
`OM_EXECUTOR=celery` hands it to `om_workers` queues and shares locks and counters through Redis, so any
number of API replicas and workers cooperate on one thread. Either way the engine's model calls follow the
one model-call policy (`om_core.models.call_policy`), with budgets in the workers' Redis bucket whenever
this process has a Redis.

The Redis and Celery adapters of the core's ports are the ones the workers run on (`om_adapters`). They
are imported only where celery mode or a Redis needs them, so an inline API loads no Celery.
"""

from __future__ import annotations

import contextvars
import importlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from om_api.metrics import Metrics
from om_api.settings import ApiSettings
from om_api.sse import EventFanout
from om_core import EventPublisher, MemoryEngine, RateLimiter, StoredEvent, Task, build_engine
from om_core.engine import QUEUES
from om_core.engine.tasks import wait_all
from om_core.tenancy import access

log = logging.getLogger("om.api")

#: Celery queues whose depth /metrics reports (om_workers routes tasks to these).


class BackgroundExecutor:
    """The in-process executor of a server: fire-and-forget work runs on a small thread pool, so a turn
    never waits for buffering; blocking work (a turn waiting for its observation) runs on a pool of its
    own, so it never queues behind background work, and is waited for at most its deadline.

    (The engine's `InlineExecutor` runs everything in the caller's thread and remembers every task, which
    suits tests, not a long-running server.)
    """

    def __init__(self, background_workers: int = 4, blocking_workers: int = 8) -> None:
        self._background = ThreadPoolExecutor(background_workers, thread_name_prefix="om-background")
        self._blocking = ThreadPoolExecutor(blocking_workers, thread_name_prefix="om-blocking")
        self._runner: Callable[[Task], object] | None = None

    def bind(self, runner: Callable[[Task], object]) -> None:
        self._runner = runner

    def _call(self, task: Task) -> object:
        if self._runner is None:
            raise RuntimeError("BackgroundExecutor is not bound to an engine")
        return self._runner(task)

    def _logged(self, task: Task) -> None:
        try:
            self._call(task)
        except Exception:
            log.exception("background task %s failed", type(task).__name__)

    def submit(self, task: Task) -> None:
        self._background.submit(self._logged, task)

    def run(self, task: Task, deadline_s: float) -> bool:
        # The caller waits for this work as if it ran inline, so it runs in the caller's context (the
        # engine collects the events a turn produced in a context variable).
        context = contextvars.copy_context()
        future = self._blocking.submit(context.run, self._call, task)
        try:
            future.result(timeout=deadline_s)
        except FutureTimeout:
            return False
        return True

    def run_all(self, tasks: Sequence[Task], deadline_s: float) -> bool:
        """Every task on the blocking pool at once, each in the caller's context; all waited for within
        the one deadline, the first failure raised after."""
        futures = [self._blocking.submit(contextvars.copy_context().run, self._call, task) for task in tasks]
        return wait_all([f.result for f in futures], deadline_s, FutureTimeout)

    def shutdown(self) -> None:
        for pool in (self._blocking, self._background):
            pool.shutdown(wait=True, cancel_futures=True)


class _Publishers:
    """Fans each batch of stored events out to several publishers; one failing does not stop the rest."""

    def __init__(self, publishers: Sequence[EventPublisher]) -> None:
        self.publishers = list(publishers)

    def publish(self, events: Sequence[StoredEvent]) -> None:
        for publisher in self.publishers:
            try:
                publisher.publish(events)
            except Exception:
                log.exception("publishing %d events with %s failed", len(events), type(publisher).__name__)

    def close(self) -> None:
        """Let publishers that send in the background send what they hold."""
        for publisher in self.publishers:
            closer = getattr(publisher, "close", None)
            if callable(closer):
                closer()


@dataclass
class ApiRuntime:
    settings: ApiSettings
    engine: MemoryEngine
    fanout: EventFanout
    metrics: Metrics
    #: Redis client for the broker checks (celery mode only).
    broker: Any | None = None
    celery_app: Any | None = None
    background: BackgroundExecutor | None = None
    #: Redis client of the shared rate-limit bucket (inline mode with a Redis configured only).
    rate_limit_redis: Any | None = None
    keys: access.KeyVerifier = field(init=False)

    def __post_init__(self) -> None:
        self.keys = access.KeyVerifier(self.engine.db, self.settings.auth_cache_s)

    @property
    def db(self) -> Engine:
        return self.engine.db

    @property
    def distributed(self) -> bool:
        return self.settings.executor == "celery"

    def require_broker(self, *, fresh: bool = False) -> None:
        """Fail fast (503, nothing written) when the broker is down, instead of storing the messages and
        then failing to enqueue their background work.

        A turn asks this every time, so it costs no round trip: taking an idle connection from the pool
        checks its socket locally, and a server that stopped or restarted has closed it (the pool then
        reconnects, which fails while the server is down). A broker cut off without closing the
        connection is noticed by the first command that needs it (a 503 too). `fresh` (readiness) sends
        a PING."""
        if self.broker is None:
            return
        if fresh:
            self.broker.ping()
            return
        pool = self.broker.connection_pool
        pool.release(pool.get_connection())

    def queue_depths(self) -> dict[str, int]:
        if self.broker is None:
            return {}
        depths: dict[str, int] = {}
        for queue in QUEUES:
            # kombu's Redis transport keeps one list per queue plus one per priority step.
            names = [queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9))]
            depths[queue] = sum(int(self.broker.llen(name)) for name in names)
        return depths

    def workers_seen(self, timeout_s: float = 1.0) -> dict[str, list[str]]:
        """The Celery workers that answer a broadcast within `timeout_s`, each with the queues it consumes
        (empty inline: there are none). The broadcast waits the whole timeout for late replies, so callers
        are pages a person opens, never the turn path."""
        if self.celery_app is None:
            return {}
        replies = self.celery_app.control.inspect(timeout=timeout_s).active_queues() or {}
        return {
            str(name): sorted(str(q.get("name")) for q in queues or [] if isinstance(q, dict))
            for name, queues in sorted(replies.items())
        }

    def close(self) -> None:
        if self.background is not None:
            self.background.shutdown()
        for part in (self.engine.publisher, self.engine.coordination):
            closer = getattr(part, "close", None)
            if callable(closer):
                closer()
        self.engine.db.dispose()
        for client in (self.broker, self.rate_limit_redis):
            if client is not None:
                client.close()


def _inline_rate_limiter(settings: ApiSettings) -> tuple[RateLimiter | None, Any | None]:
    """(the workers' Redis bucket, its client) when a Redis is configured and there are budgets to keep,
    so an inline API next to workers, or several API replicas, spend one budget; else (None, None) and the
    engine keeps an in-process bucket. A Redis left at its default URL is not assumed to exist."""
    if not settings.redis_configured or not settings.model_call_policy().rate_limits:
        return None, None
    from redis import Redis

    from om_adapters.token_bucket import TokenBucket

    client = Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
    return TokenBucket(client), client


def import_plugins(settings: ApiSettings) -> None:
    for name in settings.plugin_modules():
        importlib.import_module(name)
        log.info("loaded plugin module %s", name)


def build_runtime(settings: ApiSettings) -> ApiRuntime:
    """The runtime for `settings`: the engine on the Celery and Redis adapters in celery mode, on a
    background thread pool in this process otherwise."""
    import_plugins(settings)
    fanout = EventFanout()
    metrics = Metrics()
    if settings.executor == "celery":
        from redis import Redis

        from om_adapters.celery_app import create_app
        from om_adapters.celery_executor import CeleryExecutor
        from om_adapters.redis_coordination import RedisCoordination
        from om_adapters.redis_events import RedisPublisher
        from om_adapters.token_bucket import TokenBucket

        # One Redis client (the broker's) for coordination, events, the bucket and the broker checks.
        broker = Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
        celery_app = create_app(settings)
        engine = build_engine(
            settings,
            executor=CeleryExecutor(celery_app),
            coordination=RedisCoordination(broker),
            publisher=_Publishers([fanout, metrics.memory, RedisPublisher(broker)]),
            rate_limiter=TokenBucket(broker),
        )
        runtime = ApiRuntime(settings, engine, fanout, metrics, broker=broker, celery_app=celery_app)
    else:
        background = BackgroundExecutor()
        limiter, limiter_redis = _inline_rate_limiter(settings)
        engine = build_engine(
            settings,
            executor=background,
            publisher=_Publishers([fanout, metrics.memory]),
            rate_limiter=limiter,
        )
        background.bind(engine.run_task)
        runtime = ApiRuntime(
            settings, engine, fanout, metrics, background=background, rate_limit_redis=limiter_redis
        )
    metrics.bind(runtime.db, runtime.queue_depths)
    return runtime
