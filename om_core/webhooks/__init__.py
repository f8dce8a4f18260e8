"""Webhooks: a tenant's HTTP endpoints receive its threads' events from the outbox, signed, in order.

- `policy.py`   the delivery knobs (backoff, bound, timeouts, the operator's private-range switch)
- `targets.py`  which URLs may be called: http(s) only, no loopback/private/link-local/... addresses
- `signing.py`  `OM-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>` and its verification
- `store.py`    endpoints, their cursor and state, their last attempts
- `delivery.py` one endpoint's run: the events past its cursor, one at a time, the cursor moved after a 2xx

Delivery runs only in `DeliverWebhooks` tasks (queue `om.webhook`), one endpoint per task under the
endpoint's lock, kicked by the maintenance pass: nothing on the turn path reads or calls an endpoint.
"""
