"""The knobs of webhook delivery, from the service settings (`OM_WEBHOOK_*`)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class WebhookPolicy:
    #: Deliver to loopback, private, link-local, ... addresses (`OM_WEBHOOK_ALLOW_PRIVATE`): off, so a tenant
    #: cannot make the service call into the network it runs in.
    allow_private: bool = False
    #: Backoff after the n-th consecutive failure: base × 2^(n-1), at most `retry_max_s`, times a jitter
    #: in [0.5, 1].
    retry_base_s: float = 5.0
    retry_max_s: float = 3600.0
    #: Consecutive failures after which the endpoint is `dead` (no more attempts until re-enabled).
    max_failures: int = 20
    #: Only events at least this old are delivered: an outbox id is taken at insert, so a lower id can
    #: commit after a higher one; the cursor never moves past an event younger than this.
    settle_s: float = 5.0
    connect_timeout_s: float = 3.0
    timeout_s: float = 10.0
    #: Longest run of one task; the rest goes to the next task (the endpoint's lock is released between).
    run_budget_s: float = 60.0

    def backoff_s(self, failures: int, rng: random.Random | None = None) -> float:
        delay = min(self.retry_base_s * (2 ** max(failures - 1, 0)), self.retry_max_s)
        jitter: float = (rng or random).random()
        return float(delay * (0.5 + 0.5 * jitter))
