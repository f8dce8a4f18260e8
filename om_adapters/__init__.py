"""The Redis and Celery adapters of the core's ports, which both shells run on.

The API (in celery mode, or next to a Redis) and the workers use the same ones, so they live below both
shells and above the core: `celery_app` (the Celery application: queues, routes, delivery settings, the
worker knobs it needs), `celery_executor` (the engine's `Executor` on Celery), `redis_coordination`
(the core's `Coordination` on Redis: locks, counters, the fleet's clock), `redis_events` (live event
fan-out on Redis pub/sub), `token_bucket` (the model-call budget every process spends) and `broker`
(kombu's Redis transport with one client per channel). What both shells need to be followed: `telemetry`
(OpenTelemetry's SDK and instrumentations, when `OTEL_*` asks), `request_context` (the request id and
tenant, carried in task headers) and `logs` (`OM_LOG_FORMAT`).

`om_core` is imported first, as in every om package: it pins litellm to its local price table.
"""

import om_core  # noqa: F401
