"""Early triggers (behaviour §4.7): a provider change or an idle TTL that makes waiting work due before its
token threshold, read from the thread's stored activity (never from its messages). Observation's activation
and reflection ask the same question of their own phase's options."""

from __future__ import annotations

from datetime import datetime

from om_core.config.options import ResolvedConfig
from om_core.engine.core import Activity
from om_core.policy.early_activation import provider_changed, resolve_ttl_ms, ttl_expired
from om_core.store.payloads import TriggerDetails


def early_trigger(
    cfg: ResolvedConfig, activity: Activity, now: datetime, *, reflection: bool
) -> tuple[str | None, TriggerDetails]:
    """Provider change beats idle TTL (behaviour §4.7). Reads the thread's stored activity, not messages."""
    phase = cfg.reflection if reflection else cfg.observation
    if phase.activate_on_provider_change and provider_changed(activity.actor_model, activity.previous_model):
        return "provider_change", {
            "previousModel": activity.previous_model,
            "currentModel": activity.actor_model,
        }
    ttl = resolve_ttl_ms(phase.activate_after_idle, activity.actor_model, activity.provider_options)
    if ttl is not None and activity.last_activity_at is not None:
        expired, idle_ms = ttl_expired(ttl, activity.last_activity_at, now)
        if expired:
            return "ttl", {
                "lastActivityAt": int(activity.last_activity_at.timestamp() * 1000),
                "ttlExpiredMs": idle_ms,
            }
    return None, {}
